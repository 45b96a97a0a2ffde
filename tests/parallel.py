"""How the suite is spread over pytest-xdist workers: `make test` runs `-n <cores + 1> --dist loadfile
--no-loadscope-reorder`. Each file goes to one worker as a unit (a module fixture such as a whole sweep or a
Ray cluster is built once, and a file's tests that watch processes never see their own file's other sweeps),
and the files that start the real engine are handed out first, so that no long file is left for last while
the other workers idle."""

from __future__ import annotations

import os

import pytest


def on_a_worker() -> bool:
    return "PYTEST_XDIST_WORKER" in os.environ


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]


def slow_files_first(items: list[pytest.Item]) -> None:
    """Reorder `items` in place: the files with an `integration` test (the real engine: the longest), then
    those with a `slow` test, then the rest, each part in its collection order (the workers report this order
    and the scheduler keeps it)."""
    real = {_file(item) for item in items if item.get_closest_marker("integration")}
    slow = {_file(item) for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: 0 if _file(item) in real else 1 if _file(item) in slow else 2)
