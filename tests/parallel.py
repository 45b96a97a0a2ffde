"""How the suite is spread over pytest-xdist workers: `make test` runs `-n <cores + 1> --dist loadfile
--no-loadscope-reorder`. Each file goes to one worker as a unit (a module fixture such as a whole sweep or a
Ray cluster is built once, and a file's tests that watch processes never see their own file's other sweeps),
and the files that start the real engine are handed out first, so that no long file is left for last while
the other workers idle."""

from __future__ import annotations

import os
from collections.abc import Mapping

import pytest


def on_a_worker() -> bool:
    return "PYTEST_XDIST_WORKER" in os.environ


def check_cache(environ: Mapping[str, str], pid: int) -> str:
    """Where a test process remembers validation answers (core/memo.py): the directory `make test` names for all
    its parts ($QUANT_TEST_CHECK_CACHE), else one per xdist run, shared by its workers and the sweeps they start,
    else one per process. An answer is keyed by everything it depends on, so what one worker computed (importing
    compressed_tensors to check a scheme takes seconds of CPU) the others reuse; each is computed once per run."""
    if environ.get("QUANT_TEST_CHECK_CACHE"):
        return environ["QUANT_TEST_CHECK_CACHE"]
    run = environ.get("PYTEST_XDIST_TESTRUNUID") or str(pid)
    return os.path.join(environ.get("PYTEST_TMPDIR", "/tmp"), f"quant-test-checks-{run}")


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]


def slow_files_first(items: list[pytest.Item]) -> None:
    """Reorder `items` in place: the files with an `integration` test (the real engine: the longest), then
    those with a `slow` test, then the rest, each part in its collection order (the workers report this order
    and the scheduler keeps it)."""
    real = {_file(item) for item in items if item.get_closest_marker("integration")}
    slow = {_file(item) for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: 0 if _file(item) in real else 1 if _file(item) in slow else 2)
