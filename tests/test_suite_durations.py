"""`make test`'s durations table (benchmarks/suite_durations.py) from the junit XML its parts write: each test's
seconds, the engine servers each test started (tests/engine_starts.py; a module fixture's with the first test
that uses it), per part and per file. Checked on a generated suite run as the Makefile runs a part."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from benchmarks.suite_durations import read_parts, render
from tests.engine_starts import module_run
from tests.helpers import REPO

CONFTEST = 'pytest_plugins = ["tests.engine_starts"]\n'

# a process run as a server's module is what the watch counts: here one that only sleeps (none is asked anything)
SERVER_MODULE = "import time\ntime.sleep(60)\n"
SUITE = """\
import subprocess
import sys
import time

import pytest


def server():
    return subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", "m.gguf"])


@pytest.fixture(scope="module")
def shared():
    proc = server()   # alive when the first test that uses it ends: counted then, poll or not
    time.sleep(1.5)
    yield
    proc.kill()
    proc.wait()


def test_first_user_of_the_shared_server(shared):
    pass


def test_second_user_of_the_shared_server(shared):
    pass


def test_starts_two_of_its_own():
    procs = [server(), server()]
    time.sleep(2.5)   # ended before the test ends: seen by the watch's poll (every second) only
    for proc in procs:
        proc.kill()
        proc.wait()


def test_starts_none():
    time.sleep(0.3)
"""


def _suite(tmp_path: Path) -> Path:
    suite = tmp_path / "suite"
    (suite / "llama_cpp").mkdir(parents=True)
    (suite / "llama_cpp" / "__init__.py").write_text("")
    (suite / "llama_cpp" / "server.py").write_text(SERVER_MODULE)
    (suite / "conftest.py").write_text(CONFTEST)
    (suite / "test_engines.py").write_text(SUITE)
    return suite


def test_a_server_is_a_python_running_a_servers_module_not_its_launcher_or_a_flags_probe():
    server = [".venv-serve/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"]
    assert module_run(server) == "vllm.entrypoints.openai.api_server"
    launcher = ["python3.11", "-I", "-S", "perf/engines/lifeline.py", "7", "15", "VLLM::", "--", *server]
    assert module_run(launcher) is None
    flags_probe = [".venv-serve/bin/python", "-c", "runpy.run_module('vllm.entrypoints.openai.api_server')"]
    assert module_run(flags_probe) is None
    assert module_run(["python", "-B", "-m", "llama_cpp.server"]) == "llama_cpp.server"
    assert module_run(["python"]) is None and module_run(["python", "-m"]) is None


def test_engine_starts_are_counted_per_test_and_tabled_per_part_and_file(tmp_path):
    suite = _suite(tmp_path)
    timings = tmp_path / "timings"
    env = {**os.environ, "QUANT_TEST_ENGINE_STARTS": "1",
           "PYTHONPATH": os.pathsep.join([str(suite), str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           f"--junitxml={timings / 'integration.xml'}", str(suite)],
                          cwd=suite, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (part,) = read_parts(timings)
    assert part.name == "integration" and part.wall_s > 0
    starts = {t.name: t.engine_starts for t in part.tests}
    assert starts == {"test_first_user_of_the_shared_server": 1, "test_second_user_of_the_shared_server": 0,
                      "test_starts_two_of_its_own": 2, "test_starts_none": 0}
    seconds = {t.name: t.seconds for t in part.tests}
    assert seconds["test_first_user_of_the_shared_server"] >= 1.5 > seconds["test_second_user_of_the_shared_server"]
    table = render(read_parts(timings), top=2).splitlines()
    assert table[1].split() == ["integration", f"{part.wall_s:.0f}", "4", "3"]
    longest = table[table.index("the 2 longest tests (seconds; set-up and teardown included)") + 1]
    assert longest.endswith("test_engines.py::test_starts_two_of_its_own") and " 2 engine " in longest
    assert table[-1].split() == ["3", "integration", "test_engines.py"]
    # the table the next run hands files out by (tests/parallel.py): tests under half a second left out
    from benchmarks.suite_durations import main
    assert main([str(timings), "--write-durations", str(tmp_path / "durations.json")]) == 0
    written = json.loads((tmp_path / "durations.json").read_text())
    assert list(written) == ["test_engines.py"]
    assert set(written["test_engines.py"]) == {"test_first_user_of_the_shared_server", "test_starts_two_of_its_own"}
    assert written["test_engines.py"]["test_starts_two_of_its_own"] == round(seconds["test_starts_two_of_its_own"], 1)


def test_without_the_variable_nothing_is_counted(tmp_path):
    suite = _suite(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "QUANT_TEST_ENGINE_STARTS"}
    env["PYTHONPATH"] = os.pathsep.join([str(suite), str(REPO), os.environ.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "two",
                           f"--junitxml={tmp_path / 'part.xml'}", str(suite)],
                          cwd=suite, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "engine_starts" not in (tmp_path / "part.xml").read_text()
    assert render(read_parts(tmp_path), top=1).splitlines()[1].split()[-1] == "-"   # not counted, not "0"


def test_no_timings_is_exit_2(tmp_path, capsys):
    from benchmarks.suite_durations import main

    assert main([str(tmp_path)]) == 2
    assert "make test" in capsys.readouterr().err


def test_the_makefile_writes_every_part_where_the_table_reads_it():
    import re

    from benchmarks.suite_durations import PARTS

    makefile = (REPO / "Makefile").read_text()
    test_target = makefile.split("\ntest: ", 1)[1].split("\n\n", 1)[0] + makefile.split("\ntest-browser:", 1)[1]
    written = re.findall(r"--junitxml=\$\(TIMINGS\)/(\w+)\.xml", test_target.split("\ntest-fast:", 1)[0])
    assert written == list(PARTS)
    assert "\t@$(PY) benchmarks/suite_durations.py $(TIMINGS)\n" in makefile
    assert re.search(r"^TIMINGS := runs/test-timings$", makefile, re.M)
