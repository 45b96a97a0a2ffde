"""`make test` on pytest-xdist workers (tests/parallel.py): a file's tests stay on one worker, so its module
fixture is built once; the files with integration tests, then those with slow ones, are handed out first; the
other files spread over the workers. Checked on a generated suite run with the Makefile's flags, on 2 workers."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.helpers import REPO
from tests.parallel import (REAL_ENGINE_MARK, check_cache, longest_files_first, measured_durations,
                            unlisted_real_engine_files)

CONFTEST = """\
from tests.parallel import on_a_worker, longest_files_first


def pytest_collection_modifyitems(items):
    if on_a_worker():
        longest_files_first(items)
"""

LOG = """\
import os


def log(what):
    with open(os.environ["RAN"], "a") as out:
        out.write(f"{os.environ['PYTEST_XDIST_WORKER']} {what}\\n")
"""

FREE = """\
import time

import pytest

from log import log


@pytest.mark.parametrize("n", range(3))
def test_free(n):
    time.sleep(0.2)
    log(__name__)
"""

REAL = """\
import pytest

from log import log

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sweep():
    log("sweep built")


@pytest.mark.parametrize("n", range(4))
def test_reads_the_sweep(sweep, n):
    log(__name__)
"""

SLOW = """\
import pytest

from log import log


@pytest.mark.slow
def test_slow():
    log(__name__)


def test_beside_it():
    log(__name__)
"""


def test_a_files_fixture_is_built_once_longest_files_first_the_rest_spread(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(CONFTEST)
    (suite / "log.py").write_text(LOG)
    for letter in "abcdef":   # collected before the slow file
        (suite / f"test_{letter}_free.py").write_text(FREE)
    (suite / "test_y_slow.py").write_text(SLOW)
    (suite / "test_z_real.py").write_text(REAL)
    ran = tmp_path / "ran"
    env = {**os.environ, "RAN": str(ran),
           "PYTHONPATH": os.pathsep.join([str(REPO), str(suite), os.environ.get("PYTHONPATH", "")])}
    flags = re.search(r"^PARALLEL := (.*)$", (REPO / "Makefile").read_text(), re.M).group(1)
    argv = flags.replace("$(WORKERS)", "2").split()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *argv, str(suite)],
                          cwd=suite, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "24 passed" in proc.stdout
    lines = [line.split(" ", 1) for line in ran.read_text().splitlines()]
    assert [what for _, what in lines].count("sweep built") == 1
    assert len({worker for worker, what in lines if what in ("sweep built", "test_z_real")}) == 1   # one worker
    assert len({worker for worker, what in lines if what == "test_y_slow"}) == 1
    firsts = {next(what for worker, what in lines if worker == w) for w in ("gw0", "gw1")}
    assert firsts == {"sweep built", "test_y_slow"}      # the real-engine file, then the slow one, before the rest
    assert {worker for worker, what in lines if what.endswith("_free")} == {"gw0", "gw1"}


def test_a_runs_workers_share_one_check_cache_and_make_test_names_one_for_all_its_parts():
    one_run = {"PYTEST_TMPDIR": "/t", "PYTEST_XDIST_TESTRUNUID": "abc"}
    assert check_cache(one_run, pid=11) == check_cache(one_run, pid=12) == "/t/quant-test-checks-abc"
    assert check_cache({**one_run, "PYTEST_XDIST_TESTRUNUID": "def"}, pid=11) != check_cache(one_run, pid=11)
    assert check_cache({"PYTEST_TMPDIR": "/t"}, pid=11) == "/t/quant-test-checks-11"   # no xdist: this process
    assert check_cache({**one_run, "QUANT_TEST_CHECK_CACHE": "/runs/checks"}, pid=11) == "/runs/checks"
    makefile = (REPO / "Makefile").read_text()
    test_target = makefile.split("\ntest: ", 1)[1].split("\n\n", 1)[0]
    assert "rm -rf $(TIMINGS)/*.xml $(CHECKS)" in test_target   # emptied first: each answer computed once per run
    assert all(line.startswith(("\t$(COUNTED) -m pytest", "\t$(TESTPY) -m pytest")) for line in
               test_target.splitlines() if "-m pytest" in line)
    assert re.search(r"^TESTPY := QUANT_TEST_CHECK_CACHE=\$\(CHECKS\) \$\(PY\)$", makefile, re.M)


class Item:
    """What the ordering reads of a collected test: its node id and marks."""

    def __init__(self, nodeid: str, *marks: str):
        self.nodeid, self.marks = nodeid, marks

    def get_closest_marker(self, name: str):
        return name if name in self.marks else None


def test_files_are_handed_out_longest_first_by_their_selected_tests_measured_seconds():
    items = [Item("a.py::quick"), Item("a.py::long"), Item("b.py::t1"), Item("b.py::t2"),
             Item("new.py::sweep", "integration"), Item("new_slow.py::t", "slow"), Item("c.py::t"),
             Item("d.py::gone_quick")]
    durations = {"a.py": {"long": 50.0}, "b.py": {"t1": 40.0, "t2": 30.0}, "c.py": {}, "d.py": {"t": 20.0}}
    longest_files_first(items, durations)
    # b 70 s, new (a real-engine test never measured: guessed a sweep) 60, a 50 (selected tests only: a
    # part that ran only a.py::quick would find it short), new_slow guessed 10, then c and d in collection order
    assert [i.nodeid for i in items] == ["b.py::t1", "b.py::t2", "new.py::sweep", "a.py::quick", "a.py::long",
                                         "new_slow.py::t", "c.py::t", "d.py::gone_quick"]
    just_quick = [Item("a.py::quick"), Item("c.py::t")]
    longest_files_first(just_quick, {"a.py": {"long": 50.0}, "c.py": {"t": 1.0}})
    assert [i.nodeid for i in just_quick] == ["c.py::t", "a.py::quick"]


def test_the_shipped_durations_name_files_that_exist():
    durations = measured_durations()
    gone = [file for file in durations if not (REPO / file).is_file()]
    assert durations and not gone, (f"tests/durations.json names files that are gone: {gone}; rename their keys, or "
                                    "after `make test` run python benchmarks/suite_durations.py --write-durations "
                                    "tests/durations.json")


def test_the_real_engine_parts_collect_only_the_files_that_mark_real_engine_tests(tmp_path):
    makefile = (REPO / "Makefile").read_text()
    assert f"REAL := $(shell grep -rl --include='test_*.py' '{REAL_ENGINE_MARK}' tests)" in makefile
    test_target = makefile.split("\ntest: ", 1)[1].split("\n\n", 1)[0]
    for part in ("integration", "engine_alone", "engine_exclusive"):
        (line,) = [line for line in test_target.splitlines() if f"/{part}.xml" in line]
        assert line.endswith(" $(REAL)"), line
    marked, elsewhere = tmp_path / "test_marked.py", tmp_path / "test_elsewhere.py"
    marked.write_text("import pytest\npytestmark = pytest.mark.integration\n")
    elsewhere.write_text("import pytest\nREAL = pytest.mark.integration\n".replace(".mark.", ".mark ."))
    items = [PathItem(marked, "integration"), PathItem(elsewhere, "integration"), PathItem(tmp_path / "absent.py")]
    assert unlisted_real_engine_files(items) == [str(elsewhere)]


class PathItem(Item):
    def __init__(self, path, *marks: str):
        super().__init__(f"{path.name}::t", *marks)
        self.path = path


def test_a_files_length_counts_only_the_tests_its_part_selects():
    """tests/quant/test_validate.py is long in the parallel part but holds one short real-engine test;
    tests/quantize/test_gptqmodel.py's real-engine tests are a sweep: in the real-engine part it goes first."""
    files = ["tests/quant/test_validate.py", "tests/quantize/test_gptqmodel.py"]
    durations = measured_durations()
    assert sum(durations[files[0]].values()) > sum(durations[files[1]].values())   # all tests counted
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only",
                           "-m", "integration", *files], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTEST_XDIST_WORKER": "gw0"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    order = [line.split("::")[0] for line in proc.stdout.splitlines() if "::" in line]
    assert order and order[0] == files[1] and order[-1] == files[0], order
