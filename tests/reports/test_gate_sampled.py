"""Sampled tasks in the gate and the reports: items scored by their success rate over K samples are paired
item by item; reasoning traces that grow beyond `max_reasoning_ratio` of the baseline's are a regression; the
sampled figures (avg@K, pass@k, maj@K, no answer, reasoning tokens) appear in pareto.md and report.html."""

from __future__ import annotations

import json

import pytest

from core.recipe import RecipeError, parse_recipe
from core.results import Results
from core.run_layout import RunLayout
from quant.cli import main
from reports.gate_reasoning import ratio_interval
from reports.html import render_html
from reports.markdown import render_markdown
from tests.fixtures import accuracy, variant, write_run

RECIPE = "name: m\nmodel: demo\nvariants: [{name: bf16, baseline: true}]\ntasks: [demo_math]\n"
K = 4


def _items(run, name: str, rates: list[float], tokens: list[float]) -> None:
    path = RunLayout(run).variant(name).items("math")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"doc_id": i, "prompt": f"q{i}", "metrics": {
        "exact_match": r, "reasoning_tokens": t}}) + "\n" for i, (r, t) in enumerate(zip(rates, tokens))))


def _side(rates: list[float], tokens: list[float]) -> dict:
    mean = sum(rates) / len(rates)
    sampling = {"repeats": K, "metric": "exact_match,none", "avg": {"value": mean, "n": len(rates),
                                                                    "ci95": [mean - 0.05, mean + 0.05]},
                "pass_at": {"1": mean, "2": min(1.0, mean + 0.05), "4": min(1.0, mean + 0.08)},
                "no_answer": {"value": 0.02, "n": len(rates), "ci95": [0.0, 0.05]}}
    record = variant({"math": mean})
    t = sum(tokens) / len(tokens)
    record["accuracy"]["math"] = accuracy(mean, n=len(rates), sampling=sampling,
                                          reasoning_tokens={"value": t, "n": len(tokens), "ci95": [t - 5, t + 5]})
    return record


def _run(tmp_path, base: tuple, cand: tuple, gates: dict) -> object:
    run = write_run(tmp_path / "run", {"bf16": _side(*base), "q": _side(*cand)}, gates=gates)
    _items(run, "bf16", *base)
    _items(run, "q", *cand)
    return run


RATES = [1.0, 0.75, 1.0, 0.5, 1.0, 1.0, 0.25, 1.0] * 25   # 200 items, K = 4
TOKENS = [100.0 + 10 * (i % 7) for i in range(200)]


def test_max_reasoning_ratio_schema():
    assert parse_recipe(RECIPE + "gates: {max_reasoning_ratio: 1.2}").gates.max_reasoning_ratio == 1.2
    with pytest.raises(RecipeError, match="max_reasoning_ratio"):
        parse_recipe(RECIPE + "gates: {max_reasoning_ratio: 0.8}")


def test_paired_rates_that_hold_pass_and_lost_rates_are_a_regression(tmp_path, capsys):
    run = _run(tmp_path, (RATES, TOKENS), (RATES, TOKENS), {"max_drop": 0.05, "rule": "non-inferiority"})
    assert main(["gate", "--baseline", str(run), "--candidate", f"{run}:q"]) == 0
    lower = [max(0.0, r - 0.25) for r in RATES]   # a quarter of the samples lost on every item
    run = _run(tmp_path / "2", (RATES, TOKENS), (lower, TOKENS), {"max_drop": 0.05, "rule": "non-inferiority"})
    assert main(["gate", "--baseline", str(run), "--candidate", f"{run}:q"]) == 1
    out = capsys.readouterr().out
    assert "paired t" in out   # rates, not 0/1 scores: the bounded paired t on per-item differences


def test_traces_grown_beyond_the_ratio_are_a_regression_and_within_it_pass(tmp_path, capsys):
    gates = {"max_drop": 0.05, "max_reasoning_ratio": 1.2, "rule": "significant"}
    run = _run(tmp_path, (RATES, TOKENS), (RATES, [t * 1.5 for t in TOKENS]), gates)
    assert main(["gate", "--baseline", str(run), "--candidate", f"{run}:q"]) == 1
    line = next(x for x in capsys.readouterr().out.splitlines() if "reasoning_tokens" in x)
    assert "REGRESSION" in line and "1.50x the baseline's" in line
    run = _run(tmp_path / "2", (RATES, TOKENS), (RATES, [t * 1.1 for t in TOKENS]), gates)
    assert main(["gate", "--baseline", str(run), "--candidate", f"{run}:q"]) == 0


def test_the_ratio_needs_traces_on_the_baseline(tmp_path, capsys):
    run = write_run(tmp_path / "run", {"bf16": variant({"math": 0.9}), "q": variant({"math": 0.9})},
                    gates={"max_reasoning_ratio": 1.2})
    assert main(["gate", "--baseline", str(run), "--candidate", f"{run}:q"]) == 2
    assert "records no reasoning traces" in capsys.readouterr().err


def test_the_ratio_interval_is_the_paired_ratio_of_means():
    ratio, low, high = ratio_interval(TOKENS, [t * 1.3 for t in TOKENS], 0.95)
    assert ratio == pytest.approx(1.3) and low == pytest.approx(1.3) and high == pytest.approx(1.3)
    noisy = [t * (1.3 if i % 2 else 1.1) for i, t in enumerate(TOKENS)]
    ratio, low, high = ratio_interval(TOKENS, noisy, 0.95)
    assert low < ratio < high and 1.1 < low and high < 1.3


def test_sampled_figures_appear_in_the_reports(tmp_path):
    run = _run(tmp_path, (RATES, TOKENS), (RATES, TOKENS), {})
    results = Results.model_validate_json(RunLayout(run).results.read_text())
    markdown = render_markdown(results, run)
    section = markdown.split("## Sampled tasks")[1].split("## ")[0]
    row = next(x for x in section.splitlines() if x.startswith("| math | q"))
    assert "| 4 |" in row and "@1 0.812, @2 0.863, @4 0.892" in row and "2.0%" in row and "| 130 |" in row
    assert "Sampled tasks" in render_html(results, None, run)


def test_diff_ranks_items_by_the_rate_they_lost_and_shows_every_sample(tmp_path, capsys):
    run = _run(tmp_path, (RATES[:40], TOKENS[:40]), (RATES[:40], TOKENS[:40]), {"min_n": 10})
    lower = list(RATES[:40])
    lower[2], lower[5] = 0.75, 0.25   # item 5 lost 3 of 4 samples, item 2 one
    path = RunLayout(run).variant("q").items("math")
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for record, rate in zip(records, lower):
        record["metrics"]["exact_match"] = rate
        record["resps"] = [[" #### 4" if i < rate * K else " #### 5" for i in range(K)]]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(["diff", "--baseline", str(run), "--candidate", f"{run}:q", "--task", "math"]) == 0
    out = capsys.readouterr().out
    assert out.index("LOST item 5") < out.index("LOST item 2")
    assert "[sample 1]  #### 4" in out and "[sample 4]  #### 5" in out


def test_sampled_power_counts_the_gates_own_calls_on_measured_rates(tmp_path):
    """benchmarks/sampled_power.py: a candidate that loses nothing and draws the baseline's random numbers gives
    the same answers (never called); one that loses every answer always is; an item never solved has nothing
    to lose; the population is the per-item rates a run stored."""
    import numpy as np
    from benchmarks.sampled_power import measured_chances, regression_share

    _items(tmp_path, "bf16", [1.0, 0.75, 0.0, 0.25], [10, 10, 10, 10])
    assert measured_chances(tmp_path, "bf16", "math", "exact_match").tolist() == [1.0, 0.75, 0.0, 0.25]
    always, never = np.ones(10), np.zeros(10)
    assert regression_share(always, 40, 5, 0.0, "point", 0.05, 20, same_seeds=True) == 0.0
    assert regression_share(always, 40, 5, 1.0, "significant", 0.05, 20, same_seeds=False) == 1.0
    assert regression_share(never, 40, 5, 0.3, "point", 0.05, 20, same_seeds=False) == 0.0
