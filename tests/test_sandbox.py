"""Generated code is confined: every hostile program fails and leaves the host untouched."""

import pytest

from evals.execute import Limits, run_program
from evals.hostile import check, corpus
from evals.sandbox import capabilities, describe


def test_the_sandbox_is_in_force_here():
    # make setup installs bubblewrap; without it the corpus cannot be contained and this says why.
    assert capabilities().isolated, describe()
    assert capabilities().process_cap, describe()


@pytest.fixture(scope="module")
def outcomes():
    return {o.name: o for o in check()}


@pytest.mark.parametrize("name", sorted(corpus("/v", "/v/f", 1)))
def test_hostile_program_is_contained_and_scored_as_failure(outcomes, name):
    o = outcomes[name]
    assert not o.result.passed, o.result
    assert not o.harm, o.harm


def test_expected_failure_modes(outcomes):
    assert outcomes["infinite_loop"].result.reason == "timeout"
    assert "MemoryError" in outcomes["memory_bomb"].result.reason
    assert "Network is unreachable" in outcomes["socket_to_internet"].result.reason
    assert "no secret in reach" in outcomes["read_secrets"].result.reason


def test_honest_programs_still_pass_and_can_use_their_work_dir():
    program = ("import json, math, subprocess\n"
               "open('scratch.json', 'w').write(json.dumps([math.factorial(5)]))\n"
               "assert json.load(open('scratch.json')) == [120]\n"
               "assert subprocess.run(['true']).returncode == 0\n")
    assert run_program(program).passed


def test_limits_are_configurable():
    assert run_program("import time\ntime.sleep(2)", Limits(timeout_s=0.5)).reason == "timeout"
    assert not run_program("open('f', 'wb').write(b'x' * 65536)", Limits(file_bytes=16384)).passed


def test_without_bubblewrap_code_still_runs_and_the_gap_is_stated(monkeypatch):
    from evals import execute, hostile, sandbox

    bare = sandbox.Capabilities(bwrap=None, cgroup_v2=None, cgroup_v1={})
    monkeypatch.setattr(execute, "capabilities", lambda: bare)
    monkeypatch.setattr(hostile, "capabilities", lambda: bare)
    assert run_program("assert sum([1, 2]) == 3").passed
    assert "NO namespace isolation" in describe(bare)
    assert "not run" in hostile._unsafe_here("kill_everything")


def test_no_cgroup_is_left_behind(outcomes):
    caps = capabilities()
    bases = list(caps.cgroup_v1.values()) + ([caps.cgroup_v2] if caps.cgroup_v2 else [])
    assert not [p for base in bases for p in base.glob("quant-exec-*")]
