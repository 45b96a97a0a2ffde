"""`quant gate` exit codes (0 pass, 1 regression, 2 bad input), JUnit output, and `quant choose`."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def variant(acc: dict[str, float], tok_s=100.0, status="ok"):
    return {"status": status, "reason": None if status == "ok" else "engine: no kernel",
            "checkpoint": "/ckpt", "size_bytes": 1,
            "accuracy": {t: {"metric": "exact_match", "value": v, "n": 200, "ci95": [v - .05, v + .05]}
                         for t, v in acc.items()},
            "perf": {"w": {"points": [{"concurrency": 16, "output_tokens_per_s": tok_s,
                                       "ttft_ms": {"p99": 10.0}, "tpot_ms": {"p99": 2.0}}]}} if status == "ok" else {}}


def write_run(path: Path, variants: dict, gates=None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    results = {"recipe_name": "t", "model": "demo", "baseline": "bf16", "variants": variants,
               "recipe": {"gates": gates or {"max_drop": 0.05, "per_task": {"math": 0.02}},
                          "engine": {"args": {"max_model_len": 512}}}}
    (path / "results.json").write_text(json.dumps(results))
    return path


def quant(*args):
    proc = subprocess.run([sys.executable, "-m", "quant.cli", *args], capture_output=True, text=True, cwd=REPO)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture
def run(tmp_path):
    return write_run(tmp_path / "run", {
        "bf16": variant({"math": 0.90, "code": 0.80}, tok_s=100),
        "ok-q": variant({"math": 0.89, "code": 0.78}, tok_s=150),
        "bad-q": variant({"math": 0.60, "code": 0.79}, tok_s=200),
        "unserved": variant({"math": 0.90, "code": 0.80}, status="unsupported"),
    })


def test_pass(run, tmp_path):
    code, out = quant("gate", "--baseline", str(run), "--candidate", f"{run}:ok-q", "--junit", str(tmp_path / "j.xml"))
    assert code == 0, out
    assert 'failures="0"' in (tmp_path / "j.xml").read_text()


def test_regression_and_junit(run, tmp_path):
    code, out = quant("gate", "--baseline", str(run), "--candidate", f"{run / 'results.json'}:bad-q",
                      "--junit", str(tmp_path / "j.xml"))
    assert code == 1, out
    assert "REGRESSION" in out
    xml = (tmp_path / "j.xml").read_text()
    assert 'tests="2" failures="1"' in xml and "math.exact_match" in xml


def test_per_task_policy_file(run, tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text("max_drop: 0.05\nper_task: {math: 0.005}\n")
    code, _ = quant("gate", "--baseline", str(run), "--candidate", f"{run}:ok-q", "--policy", str(policy))
    assert code == 1


@pytest.mark.parametrize("candidate", ["{run}/missing", "{run}:nope", "{run}"])
def test_bad_input_is_exit_2(run, candidate):
    code, out = quant("gate", "--baseline", str(run), "--candidate", candidate.format(run=run))
    assert code == 2, out
    assert "Traceback" not in out


def test_choose_fastest_within_drop(run):
    code, out = quant("choose", str(run), "--task", "math", "--max-drop", "0.02", "--json")
    assert code == 0, out
    choice = json.loads(out)
    assert choice["variant"] == "ok-q"
    assert "bad-q" in choice["rejected"] and "unserved" in choice["rejected"]
    assert "--model /ckpt" in choice["serve_command"] or "/ckpt" in choice["serve_command"]
