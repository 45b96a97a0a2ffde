"""Crashes are never regressions: every reader of results (gate, choose, compare, report) answers bad input
with exit 2 and one line naming the file and what is wrong, never a traceback (exit 1 means regression)."""

import json

import pytest

from core.results import SCHEMA_VERSION
from tests.fixtures import results, variant, write_items, write_run
from tests.helpers import quant

LM_EVAL_RESULTS = {"results": {"gsm8k": {"exact_match,strict-match": 0.41}}, "configs": {"gsm8k": {}},
                   "versions": {"gsm8k": 3}}


def one_line_error(code: int, out: str, prefix: str, *needles: str) -> None:
    assert code == 2, out
    assert "Traceback" not in out
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(prefix), out
    for needle in needles:
        assert needle in lines[0], out


@pytest.fixture
def good(tmp_path):
    run = write_run(tmp_path / "good", {"bf16": variant({"math": 0.9}), "q": variant({"math": 0.88})})
    write_items(run, "bf16", "math", [1.0] * 180 + [0.0] * 20)
    write_items(run, "q", "math", [1.0] * 176 + [0.0] * 24)
    return run


def bad_file(tmp_path, kind: str):
    path = tmp_path / kind / "results.json"
    path.parent.mkdir()
    data = results({"bf16": variant({"math": 0.9}), "q": variant({"math": 0.88})})
    if kind == "lm-eval":
        path.write_text(json.dumps(LM_EVAL_RESULTS))
    elif kind == "malformed":
        path.write_text('{"variants": {')
    elif kind == "foreign":
        path.write_text(json.dumps({"models": ["a"], "scores": [0.5]}))
    elif kind == "unversioned":
        del data["schema_version"]
        path.write_text(json.dumps(data))
    elif kind == "newer":
        path.write_text(json.dumps(data | {"schema_version": SCHEMA_VERSION + 1}))
    elif kind == "non-numeric":
        data["variants"]["q"]["accuracy"]["math"]["value"] = "high"
        path.write_text(json.dumps(data))
    elif kind == "nan":
        path.write_text(json.dumps(data).replace('"value": 0.88', '"value": NaN'))
    return path, {"lm-eval": "an lm-eval results file", "malformed": "not valid JSON",
                  "foreign": "not a quant-suite results.json",
                  "unversioned": "written before results.json had a schema_version; re-run `quant sweep`",
                  "newer": f"schema_version {SCHEMA_VERSION + 1}; this quant-suite reads version {SCHEMA_VERSION}",
                  "non-numeric": "variants.q.accuracy.math.value is 'high'",
                  "nan": "variants.q.accuracy.math.value is nan"}[kind]


KINDS = ["lm-eval", "malformed", "foreign", "unversioned", "newer", "non-numeric", "nan"]


@pytest.mark.parametrize("kind", KINDS)
def test_gate_on_a_bad_results_file(tmp_path, good, kind):
    path, what = bad_file(tmp_path, kind)
    code, out = quant("gate", "--baseline", str(good), "--candidate", f"{path}:q")
    one_line_error(code, out, f"gate error: {path}: ", what)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("command", ["choose", "report", "compare"])
def test_other_readers_on_a_bad_results_file(tmp_path, good, kind, command):
    path, what = bad_file(tmp_path, kind)
    args = {"choose": ["choose", str(path)], "report": ["report", str(path)],
            "compare": ["compare", str(good), str(path)]}[command]
    code, out = quant(*args)
    one_line_error(code, out, f"{command} error: {path}: ", what)


def test_missing_metric_in_a_per_item_file(good):
    path = good / "variants" / "q" / "evals" / "math.jsonl"
    write_items(good, "q", "math", [1.0] * 200, metric="acc")
    code, out = quant("gate", "--baseline", str(good), "--candidate", f"{good}:q", "--rule", "significant")
    one_line_error(code, out, f"gate error: {path}: line 1: ", "no metric 'exact_match' (has: acc)")


def test_malformed_per_item_file(good):
    path = good / "variants" / "q" / "evals" / "math.jsonl"
    path.write_text(path.read_text() + "{not json\n")
    code, out = quant("gate", "--baseline", str(good), "--candidate", f"{good}:q")
    one_line_error(code, out, f"gate error: {path}: line 201: ", "not valid JSON")


def test_missing_variant(good):
    code, out = quant("gate", "--baseline", str(good), "--candidate", f"{good}:nope")
    one_line_error(code, out, f"gate error: {good / 'results.json'}: ", "no variant 'nope'")


def test_a_good_run_still_gates(good):
    code, out = quant("gate", "--baseline", str(good), "--candidate", f"{good}:q")
    assert code == 0, out


def test_a_results_file_nested_100000_deep_is_one_line_not_a_recursion_error(tmp_path, good):
    path = tmp_path / "deep" / "results.json"
    path.parent.mkdir()
    path.write_text('{"variants": ' + "[" * 100_000 + "]" * 100_000 + "}")
    code, out = quant("gate", "--baseline", str(good), "--candidate", f"{path}:q")
    one_line_error(code, out, f"gate error: {path}: ", "not valid JSON (nested too deeply)")
