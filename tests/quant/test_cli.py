"""One convention per kind of flag across `quant` commands (old spellings kept), one error prefix, and the
output modules choose and compare print through."""

from __future__ import annotations

import json

import pytest

from core import exit_codes
from quant.cli import build_parser
from reports.gate_rules import EXIT
from tests.helpers import quant
from tests.reports.test_gate import variant, write_run


@pytest.fixture
def run(tmp_path):
    return write_run(tmp_path / "run", {
        "bf16": variant({"math": 0.90, "code": 0.80}, tok_s=100),
        "near": variant({"math": 0.885, "code": 0.76}, tok_s=150),     # drops 0.015 and 0.04
    }, gates={"max_drop": 0.05, "per_task": {"math": 0.02}})


@pytest.mark.parametrize("argv", [["--task", "a", "b"], ["--task", "a", "--task", "b"]])
def test_list_flags_take_several_values_or_repeat(argv):
    assert build_parser().parse_args(["choose", "r", *argv]).task == ["a", "b"]
    only = ["--only" if a == "--task" else a for a in argv]
    assert build_parser().parse_args(["sweep", "r.yaml", *only]).only == ["a", "b"]


def test_choose_defaults_to_the_runs_recipe_gates_like_the_gate(run):
    code, out = quant("choose", str(run), "--json")
    report = json.loads(out)
    assert code == 0, out
    assert report["constraints"] == {"math": "drop <= 0.020", "code": "drop <= 0.050"}
    assert report["choices"]["math"]["variant"] == "near" and report["choices"]["code"]["variant"] == "near"
    code, out = quant("choose", str(run), "--task", "code", "--max-drop", "0.01")   # an explicit limit wins
    assert code == 0 and "code: deploy bf16" in out and "not near: accuracy drop 0.040 > 0.010" in out


def test_compare_takes_baseline_and_candidate_like_the_gate(run, tmp_path):
    other = write_run(tmp_path / "other", {"bf16": variant({"math": 0.80, "code": 0.80})})
    code, out = quant("compare", "--baseline", str(run), "--candidate", str(other))
    assert code == 0 and "baseline" in out.splitlines()[0]
    assert any(line.split()[:2] == ["bf16", "math"] and line.split()[-1] == "-0.100" for line in out.splitlines())
    code, out = quant("compare", "--baseline", str(run))
    assert code == 2 and out.startswith("compare error: give two runs") and "Traceback" not in out


@pytest.mark.parametrize("argv", [["choose", "missing-run"], ["report", "missing-run"],
                                  ["compare", "--baseline", "missing-run", "--candidate", "missing-run"],
                                  ["gate", "--baseline", "missing-run", "--candidate", "missing-run"],
                                  ["sweep", "missing-recipe.yaml"],
                                  ["sweep", "recipes/demo.yaml", "--out", "nosuchprotocol://bucket/run"],
                                  ["sweep", "recipes/demo.yaml", "--out", "file://relative/run"],
                                  ["gate", "--baseline", "nosuchprotocol://b/run:bf16", "--candidate", "nosuchprotocol://b/run"],
                                  ["choose", "nosuchprotocol://b/run"], ["report", "nosuchprotocol://b/run"]])
def test_every_command_errors_with_one_prefix(argv):
    code, out = quant(*argv)
    assert code == exit_codes.BAD_INPUT and out.startswith(f"{argv[0]} error: ") and "Traceback" not in out
    assert len(out.strip().splitlines()) == 1


def test_a_bad_out_url_is_reported_before_the_recipe_is_read():
    code, out = quant("sweep", "missing-recipe.yaml", "--out", "nosuchprotocol://bucket/run")
    assert code == exit_codes.BAD_INPUT and out.startswith("sweep error: nosuchprotocol://bucket/run: "), out
    assert "missing-recipe.yaml" not in out


def test_the_gates_exit_codes_are_the_commands():
    assert EXIT == {"pass": exit_codes.OK, "regression": exit_codes.FAILED, "error": exit_codes.BAD_INPUT,
                    "inconclusive": exit_codes.INCONCLUSIVE}
