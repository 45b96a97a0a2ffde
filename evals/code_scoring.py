"""pass@1 for code tasks: assemble each program, run it in the sandbox, many at once.

lm-eval scores one document at a time. A task's filter sees every response first, so `prefetch` runs all
programs from a pool of threads (each waits on its sandboxed process) and keeps the outcomes; `passed` then
answers from them, and runs a program itself only if it was not prefetched.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from evals.execute import run_program

_outcomes: dict[str, bool] = {}


class Program(NamedTuple):
    """The model's code, then the tests that judge it (run after it, with untouched builtins)."""
    solution: str
    tests: str


def humaneval_program(doc: dict, completion: str) -> Program:
    return Program(f"{doc['prompt']}{completion}\n", f"{doc['test']}\ncheck({doc['entry_point']})\n")


def mbpp_program(doc: dict, completion: str) -> Program:
    setup = doc.get("test_setup_code") or ""
    return Program(f"{setup}\n{completion}\n", "\n".join(doc["test_list"]) + "\n")


def _key(program: Program) -> str:
    return hashlib.sha256(f"{len(program.solution)}:{program.solution}{program.tests}".encode()).hexdigest()


def _run(program: Program) -> bool:
    return run_program(program.solution, tests=program.tests).passed


def workers() -> int:
    """Twice the cores: much of each run is spent waiting for the sandbox to start."""
    return max(1, min(16, 2 * len(os.sched_getaffinity(0))))


def prefetch(programs: list[Program]) -> None:
    todo = list({_key(p): p for p in programs if _key(p) not in _outcomes}.items())
    if len(todo) < 2:
        return
    with ThreadPoolExecutor(workers()) as pool:
        for (key, _), ok in zip(todo, pool.map(_run, [p for _, p in todo])):
            _outcomes[key] = ok


def passed(program: Program) -> float:
    ok = _outcomes.pop(_key(program), None)
    return float(_run(program) if ok is None else ok)


def task_functions(program_of: Callable[[dict, str], Program]):
    """(prefetch, process_results) for a code task's utils.py: an lm-eval `custom` filter_fn that leaves the
    responses as they are and runs all their programs at once, and pass@1 per document."""
    def prefetch_filter(resps: list[list[str]], docs: list[dict]) -> list[list[str]]:
        prefetch([program_of(doc, r) for rs, doc in zip(resps, docs) for r in rs])
        return resps

    def process_results(doc: dict, results: list[str]) -> dict[str, float]:
        return {"pass@1": passed(program_of(doc, results[0]))}
    return prefetch_filter, process_results
