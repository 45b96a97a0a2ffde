"""A program's outcome is kept for the process: the variants of a sweep that write the same program run it once.
A timeout is not kept (the machine's load, not the program, may have caused it), and a kept outcome is no way
around the opt-in that running unisolated needs."""

from __future__ import annotations

import pytest

from evals import code_scoring
from evals.execute import ExecResult
from evals.sandbox import IsolationRequired, capabilities, permit_unisolated

DOC = {"prompt": 'def inc(x):\n    """x plus one"""\n', "test": "def check(f):\n    assert f(1) == 2\n",
       "entry_point": "inc"}


@pytest.fixture
def runs(monkeypatch):
    """Every program really run, in order (the real sandbox runs each)."""
    ran, real = [], code_scoring.run

    def counted(program):
        ran.append(program.solution)
        return real(program)
    monkeypatch.setattr(code_scoring, "run", counted)
    monkeypatch.setattr(code_scoring, "_known", {})
    return ran


def test_the_same_program_is_run_once_and_a_new_one_is_run(runs):
    right, wrong = (code_scoring.humaneval_program(DOC, body) for body in ("    return x + 1", "    return x"))
    with permit_unisolated(True):
        code_scoring.prefetch([right, wrong])   # the baseline's answers
        assert [code_scoring.passed(right), code_scoring.passed(wrong)] == [1.0, 0.0]
        code_scoring.prefetch([right, wrong])   # a variant that wrote the same two
        assert [code_scoring.passed(right), code_scoring.passed(wrong)] == [1.0, 0.0]
        other = code_scoring.humaneval_program(DOC, "    return 1 + x")
        assert code_scoring.passed(other) == 1.0
    assert sorted(runs) == sorted([right.solution, wrong.solution, other.solution])   # each once


def test_a_timeout_is_run_again(monkeypatch):
    outcomes = iter([ExecResult(False, "timeout"), ExecResult(True, "passed")])
    monkeypatch.setattr(code_scoring, "run", lambda program: next(outcomes))   # a fault injected: a timeout
    monkeypatch.setattr(code_scoring, "_known", {})
    program = code_scoring.humaneval_program(DOC, "    return x + 1")
    with permit_unisolated(True):
        assert code_scoring.passed(program) == 0.0
        assert code_scoring.passed(program) == 1.0   # run again, and now kept
        assert code_scoring.passed(program) == 1.0


def test_a_kept_outcome_still_needs_the_opt_in_where_nothing_isolates(runs, monkeypatch):
    bare = type(capabilities())(bwrap=None, cgroup_v2=None, cgroup_v1={})
    monkeypatch.setattr(code_scoring, "capabilities", lambda: bare)
    monkeypatch.setattr("evals.sandbox.capabilities", lambda: bare)
    program = code_scoring.humaneval_program(DOC, "    return x + 1")
    monkeypatch.setitem(code_scoring._known, code_scoring._key(program), True)
    with permit_unisolated(False), pytest.raises(IsolationRequired):
        code_scoring.passed(program)
    assert runs == []
