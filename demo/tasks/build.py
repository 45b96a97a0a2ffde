"""Deterministic demo task sets (test JSONL, committed) and training items that never overlap them."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Callable, Iterator

from demo.tasks import GENERATORS

TEST_SIZE = 250
TEST_SEED = 20261130


def _items(task: str, seed: int) -> Iterator[dict]:
    gen, rng, i = GENERATORS[task], random.Random(seed), 0
    while True:
        if task == "demo_code":
            yield gen.make_item(rng, task_id=f"demo_code/{i}")
        else:
            yield gen.make_item(rng)
        i += 1


def eval_items(task: str, n: int = TEST_SIZE) -> list[dict]:
    seen, out = set(), []
    for item in _items(task, TEST_SEED):
        key = GENERATORS[task].prompt_of(item)
        if key not in seen:
            seen.add(key)
            out.append(item)
        if len(out) == n:
            return out
    raise AssertionError("unreachable")


def train_items(task: str, n: int, seed: int) -> list[dict]:
    """n training items whose prompts differ from every test prompt."""
    banned = {GENERATORS[task].prompt_of(d) for d in eval_items(task)}
    out = []
    for item in _items(task, seed):
        if GENERATORS[task].prompt_of(item) not in banned:
            out.append(item)
        if len(out) == n:
            return out
    raise AssertionError("unreachable")


def write_test_sets(path_of: Callable[[str], Path]) -> dict[str, Path]:
    """Each demo task's test set, to path_of(task) (the evals stage says where a task's data lives)."""
    written = {}
    for task in GENERATORS:
        path = path_of(task)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(d) + "\n" for d in eval_items(task)))
        written[task] = path
    return written

