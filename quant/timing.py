"""Wall seconds per stage of a variant (`ran_on.stages` in results.json): where a sweep's time goes.

A cached stage costs what its lookup costs; a stage run twice (a retried engine start) adds up."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

STAGES = ("quantize", "engine_start", "model_load", "evals", "kl", "perf")


@contextmanager
def timed(record: dict, stage: str) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        stages = record.setdefault("ran_on", {}).setdefault("stages", {})
        stages[stage] = round(stages.get(stage, 0.0) + time.perf_counter() - started, 3)
