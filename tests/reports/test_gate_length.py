"""Output length relative to the baseline: counted from the generated answers with the model's tokenizer, shown
in the reports, and gated by `min_length_ratio` (MLPerf's 90% rule): a candidate that answers too short fails."""

from __future__ import annotations

import pytest

from core.recipe import RecipeError, parse_recipe
from core.results import Results
from evals.response_length import generated_answers, response_tokens
from quant.cli import main
from reports.markdown import render_markdown
from tests.fixtures import accuracy, variant, write_items, write_run
from tests.helpers import DEMO_MODEL

RECIPE = "name: m\nmodel: demo\nvariants: [{name: bf16, baseline: true}]\ntasks: [demo_math]\n"


def _with_length(value: float, tokens: float | None) -> dict:
    record = variant({"math": value})
    if tokens is not None:
        record["accuracy"]["math"] = accuracy(value, response_tokens={"value": tokens, "n": 200,
                                                                      "ci95": [tokens - 2, tokens + 2]})
    return record


def _run(tmp_path, candidate_tokens: float | None, gates: dict | None = None):
    gates = {"max_drop": 0.05, "min_length_ratio": 0.9} if gates is None else gates
    run = write_run(tmp_path / "run", {"bf16": _with_length(0.9, 100.0), "q": _with_length(0.9, candidate_tokens)},
                    gates=gates)
    for name in ("bf16", "q"):
        write_items(run, name, "math", [1.0] * 180 + [0.0] * 20)
    return run


def test_min_length_ratio_schema():
    assert parse_recipe(RECIPE + "gates: {min_length_ratio: 0.9}").gates.min_length_ratio == 0.9
    for bad in ("0", "1.5", "-0.1"):
        with pytest.raises(RecipeError, match="min_length_ratio"):
            parse_recipe(RECIPE + f"gates: {{min_length_ratio: {bad}}}")


def test_generated_answers_are_counted_with_the_models_tokenizer():
    samples = [{"resps": [["The answer is 42."]]}, {"resps": [["7"]]}, {"resps": [[[-1.5, True]], [[-2.0, False]]]}]
    assert generated_answers(samples) == ["The answer is 42.", "7"]
    counted = response_tokens(samples, DEMO_MODEL)
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(DEMO_MODEL)
    expected = [len(tokenizer.encode(a, add_special_tokens=False)) for a in ("The answer is 42.", "7")]
    assert counted["n"] == 2 and counted["value"] == pytest.approx(sum(expected) / 2)
    assert response_tokens(samples[2:], DEMO_MODEL) is None   # multiple choice generates nothing


def test_a_candidate_that_answers_too_short_is_a_regression(tmp_path, capsys):
    run = _run(tmp_path, 80.0)   # same score, answers 80% as long
    assert main(["gate", "--baseline", str(run), "--candidate", f"{run}:q"]) == 1
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "output_length" in line)
    assert "REGRESSION" in line and "answers 80.0% of the baseline's length (80.0 vs 100.0 tokens) < 90%" in line
    assert "math" in next(line for line in out.splitlines() if "exact_match" in line)


def test_a_candidate_within_the_ratio_passes(tmp_path, capsys):
    run = _run(tmp_path, 95.0)
    assert main(["gate", "--baseline", str(run), "--candidate", f"{run}:q"]) == 0
    assert "answers 95.0% of the baseline's length" in capsys.readouterr().out


def test_the_ratio_needs_lengths_on_both_sides(tmp_path, capsys):
    run = _run(tmp_path, None)
    assert main(["gate", "--baseline", str(run), "--candidate", f"{run}:q"]) == 2
    assert "records no output lengths, the baseline does" in capsys.readouterr().err


def test_length_ratio_column(tmp_path):
    run = _run(tmp_path, 80.0, gates={})
    text = render_markdown(Results.model_validate_json((run / "results.json").read_text()), run)
    section = text.split("## math")[1].split("## ")[0]
    row = next(line for line in section.splitlines() if line.split(" | ")[1:2] == ["q"])
    assert row.split(" | ")[-2] == "80.0%"   # the length ratio, before the status
