"""How the suite is spread over pytest-xdist workers: `make test` runs `-n <cores + 1> --dist loadfile
--no-loadscope-reorder`. Each file goes to one worker as a unit (a module fixture such as a whole sweep or a
Ray cluster is built once, and a file's tests that watch processes never see their own file's other sweeps),
and the longest files are handed out first, so that no long file is left for last while the other workers
idle."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

import pytest


def on_a_worker() -> bool:
    return "PYTEST_XDIST_WORKER" in os.environ


# What marks a file as holding real-engine tests for the Makefile's REAL (a grep): the parts that run only those
# collect only such files.
REAL_ENGINE_MARK = "mark.integration"


def unlisted_real_engine_files(items: list[pytest.Item]) -> list[str]:
    """The files with a test marked integration whose text lacks REAL_ENGINE_MARK (a mark given some other way):
    the real-engine parts of `make test` would never collect them."""
    files = {str(item.path) for item in items if item.get_closest_marker("integration")}
    return sorted(f for f in files if REAL_ENGINE_MARK not in Path(f).read_text())


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


# Each file's tests' seconds as `make test` last measured them (`python benchmarks/suite_durations.py
# --write-durations tests/durations.json`): {file: {test: seconds}}, tests under half a second left out.
DURATIONS = Path(__file__).with_name("durations.json")
# What a test never measured is guessed to take: the real engine's a whole sweep, a slow one a stand-in's.
GUESS_S = {"integration": 60.0, "slow": 10.0}


def measured_durations() -> dict[str, dict[str, float]]:
    try:
        return json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return {}


def _guess(item: pytest.Item) -> float:
    return next((s for mark, s in GUESS_S.items() if item.get_closest_marker(mark)), 0.0)


def longest_files_first(items: list[pytest.Item], durations: dict[str, dict[str, float]] | None = None) -> None:
    """Reorder `items` in place, file by file, the longest first: a file's length is the sum of its selected
    tests' measured seconds (`durations`, default tests/durations.json), a test of a file never measured counting
    as a guess by its marks (a real-engine sweep, a slow test, else nothing); ties keep the collection order
    (the workers report this order and the scheduler keeps it), so that no long file is left for last while
    the other workers idle."""
    durations = measured_durations() if durations is None else durations
    length: dict[str, float] = defaultdict(float)
    for item in items:
        file = _file(item)
        known = durations.get(file)
        length[file] += _guess(item) if known is None else known.get(item.nodeid.split("::", 1)[1], 0.0)
    items.sort(key=lambda item: -length[_file(item)])


@pytest.hookimpl(trylast=True)   # after -m and -k have deselected: a file's length counts its selected tests only
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if on_a_worker():
        longest_files_first(items)
