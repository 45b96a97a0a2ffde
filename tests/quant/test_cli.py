"""One convention per kind of flag across `quant` commands (old spellings kept), one error prefix, and the
output modules choose and compare print through."""

from __future__ import annotations

import argparse
import json

import pytest

from core import exit_codes
from quant.cli import build_parser
from reports.gate_rules import EXIT
from tests.helpers import quant, quant_json
from tests.fixtures import variant, write_items, write_run


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
    code, report = quant_json("choose", str(run))
    assert code == 0, report
    assert report["constraints"] == {"math": "drop <= 0.020", "code": "drop <= 0.050"}
    assert report["choices"]["math"]["variant"] == "near" and report["choices"]["code"]["variant"] == "near"
    code, out = quant("choose", str(run), "--task", "code", "--max-drop", "0.01")   # an explicit limit wins
    assert code == 0 and "code: deploy bf16" in out and "not near: accuracy drop 0.040 > 0.010" in out


def test_compare_takes_baseline_and_candidate_like_the_gate(run, tmp_path):
    other = write_run(tmp_path / "other", {"bf16": variant({"math": 0.80, "code": 0.80})})
    code, out = quant("compare", "--baseline", str(run), "--candidate", str(other))
    assert code == 0 and "baseline" in out.splitlines()[0]
    assert any(line.split()[:2] == ["bf16", "math"] and line.split()[5] == "-0.100" for line in out.splitlines())
    code, out = quant("compare", "--baseline", str(run))
    assert code == 2 and out.startswith("compare error: give two runs") and "Traceback" not in out


@pytest.mark.parametrize("argv", [["choose", "missing-run"], ["report", "missing-run"],
                                  ["compare", "--baseline", "missing-run", "--candidate", "missing-run"],
                                  ["gate", "--baseline", "missing-run", "--candidate", "missing-run"],
                                  ["sweep", "missing-recipe.yaml"],
                                  ["sweep", "recipes/demo.yaml", "--out", "nosuchprotocol://bucket/run"],
                                  ["sweep", "recipes/demo.yaml", "--out", "file://relative/run"],
                                  ["gate", "--baseline", "nosuchprotocol://b/run:bf16", "--candidate", "nosuchprotocol://b/run"],
                                  ["choose", "nosuchprotocol://b/run"], ["report", "nosuchprotocol://b/run"],
                                  ["export", "missing-run:bf16", "missing-out"]])
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


def _commands():
    return build_parser().commands


@pytest.mark.parametrize("argv", [["gate", "--baseline", "a", "--candidate", "b", "--bogus"],
                                  ["validate", "r.yaml", "--only", "x"]])
def test_a_flag_the_command_does_not_know_is_refused_with_that_commands_usage(argv):
    code, out = quant(*argv)
    assert code == exit_codes.BAD_INPUT
    assert out.startswith(f"usage: quant {argv[0]} ") and f"quant {argv[0]}: error: unrecognized arguments: " in out


@pytest.mark.parametrize("limit", ["5", "-0.1", "nan", "two"])
def test_choose_refuses_an_accuracy_drop_that_is_no_fraction(run, limit):
    code, out = quant("choose", str(run), "--max-drop", limit)
    assert code == exit_codes.BAD_INPUT and "quant choose: error: argument --max-drop: " in out, out
    assert "deploy" not in out


def test_every_flag_has_help_and_every_command_lists_its_exit_codes():
    for name, command in _commands().items():
        for action in command._actions:
            if action.help != argparse.SUPPRESS and not isinstance(action, argparse._HelpAction):
                assert action.help, f"quant {name} {'/'.join(action.option_strings) or action.dest}: no help text"
        epilog = command.epilog or ""
        assert epilog.startswith("exit codes:"), f"quant {name}: no exit codes in its epilog"
        codes = {int(line.split()[0]) for line in epilog.splitlines()[1:] if line.split()[0].isdigit()}
        assert exit_codes.OK in codes, name
        assert exit_codes.BAD_INPUT in codes, f"quant {name}: exit 2 not listed"


def test_json_means_a_file_or_stdout_for_every_command():
    for name, command in _commands().items():
        for action in command._actions:
            if "--json" in action.option_strings:
                assert action.nargs is None and action.metavar == "FILE" and "'-': stdout" in action.help, name


def test_help_text_is_honest_about_defaults_and_lists():
    commands = _commands()
    rule = next(a for a in commands["gate"]._actions if a.dest == "rule")
    assert rule.help.endswith("(default: the policy's rule)")
    assert build_parser().parse_args(["choose", "r", "--slo", "ttft_p99=1s", "e2e_p99=2s"]).slo == \
        ["ttft_p99=1s", "e2e_p99=2s"]
    assert build_parser().parse_args(["sweep", "r.yaml", "--device", "cuda"]).device == "cuda"
    assert "1    some task has no served variant" in commands["choose"].epilog


def test_choose_prints_the_export_command_beside_the_serve_command(run):
    code, out = quant("choose", str(run), "--task", "code")
    lines = out.splitlines()
    serve = next(i for i, line in enumerate(lines) if line.strip().startswith("serve"))
    assert code == 0 and lines[serve + 1].strip() == (f"export (a folder with a model card, to hand over or push to "
                                                      f"the hub): quant export {run}:near exports/near")
    code, report = quant_json("choose", str(run), "--task", "code")
    assert report["choices"]["code"]["export_command"] == f"quant export {run}:near exports/near"


def test_choose_json_to_a_file_keeps_the_text_on_stdout(run, tmp_path):
    code, out = quant("choose", str(run), "--json", str(tmp_path / "c.json"))
    assert code == 0 and "math: deploy near" in out
    assert json.loads((tmp_path / "c.json").read_text())["choices"]["math"]["variant"] == "near"


def test_compare_takes_variants_and_shows_the_paired_interval(tmp_path):
    run = write_run(tmp_path / "run", {"bf16": variant({"math": 0.9}), "w4": variant({"math": 0.78})})
    write_items(run, "bf16", "math", [1.0] * 180 + [0.0] * 20)
    write_items(run, "w4", "math", [0.0] * 24 + [1.0] * 156 + [0.0] * 20)
    code, report = quant_json("compare", "--baseline", str(run), "--candidate", f"{run}:w4")
    assert code == 0, report
    [row] = report["rows"]
    assert row["variant"] == "bf16 -> w4" and row["n_paired"] == 200 and round(row["delta"], 3) == -0.12
    assert row["ci"][0] < -0.12 < row["ci"][1] < 0
    code, out = quant("compare", "--baseline", str(run), "--candidate", f"{run}:w4")
    assert code == 0 and "paired 95% CI" in out and "200" in out.splitlines()[1]
