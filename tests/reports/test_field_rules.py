"""The field's rules in the reports: recovery (quantized / baseline), dollars per million output tokens from the
recipe's price and the accelerators an engine holds, and `choose --objective cost`."""

from __future__ import annotations

import csv
import io

import pytest

from core.recipe import RecipeError, parse_recipe
from core.results import Accuracy, Results
from reports.choose import ChooseError, choose
from reports.cost import gpus_held, usd_per_million_tokens
from reports.markdown import render_markdown
from reports.perf_csv import render_perf_csv
from reports.ratios import recovery
from reports.table import rows_for_task
from tests.fixtures import results, variant

RECIPE = "name: m\nmodel: demo\nvariants: [{name: bf16, baseline: true}]\ntasks: [demo_math]\n"


def _priced(price: float | None = 2.0, tp: dict | None = None) -> Results:
    """bf16 at 100 tok/s; fast at 300 tok/s (on two GPUs when `tp`); cheap at 200 tok/s on one."""
    document = results({"bf16": variant({"math": 0.9}), "fast": variant({"math": 0.9}, tok_s=300),
                        "cheap": variant({"math": 0.9}, tok_s=200)})
    document["recipe"]["variants"] = [{"name": "fast", "engine_args": tp or {}}]
    if price is not None:
        document["recipe"]["cost"] = {"usd_per_gpu_hour": price}
    return Results.model_validate(document)


def test_recovery_is_quantized_over_baseline_and_inverted_where_lower_is_better():
    acc = lambda v, metric="exact_match": Accuracy(metric=metric, value=v, n=10, ci95=[v, v])
    assert recovery(acc(0.8), acc(0.76)) == pytest.approx(0.95)
    assert recovery(acc(0.5, "bits_per_byte"), acc(0.55, "bits_per_byte")) == pytest.approx(0.5 / 0.55)
    assert recovery(acc(0.0), acc(0.1)) is None


def test_recovery_column_in_pareto_md():
    document = Results.model_validate(results({"bf16": variant({"math": 0.8}), "q": variant({"math": 0.76})}))
    assert "| q | 0.760 [0.710, 0.810] | -0.040 | 95.0% |" in render_markdown(document)


def test_cost_schema():
    assert parse_recipe(RECIPE + "cost: {usd_per_gpu_hour: 2.5}").cost.usd_per_gpu_hour == 2.5
    for bad in ("cost: {usd_per_gpu_hour: -1}", "cost: {usd_per_hour: 1}"):
        with pytest.raises(RecipeError):
            parse_recipe(RECIPE + bad)
    # a price changes no measurement: the run's content hash (and so its history id) stays
    assert parse_recipe(RECIPE + "cost: {usd_per_gpu_hour: 9}").content_hash() == parse_recipe(RECIPE).content_hash()


def test_dollars_per_million_output_tokens_count_every_gpu_the_engine_holds():
    document = _priced(2.0, {"tensor_parallel_size": 2})
    assert gpus_held(document, "fast") == 2 and gpus_held(document, "cheap") == 1
    # $2/h per GPU: 100 tok/s on one GPU is 360,000 tokens for $2
    assert usd_per_million_tokens(document, "bf16", 100) == pytest.approx(2 / 0.36)
    assert usd_per_million_tokens(document, "fast", 300) == pytest.approx(2 * 2 / 1.08)
    assert usd_per_million_tokens(_priced(None), "bf16", 100) is None
    rows = {r.variant: r for r in rows_for_task(document, "math")}
    assert rows["cheap"].usd_per_mtok == pytest.approx(2 / 0.72)
    assert "| $/M out tok |" in render_markdown(document) and "| 5.56 |" in render_markdown(document)


def test_perf_csv_prices_every_level():
    document = _priced(2.0)
    rows = list(csv.DictReader(io.StringIO(render_perf_csv(document.dump()))))
    assert float(rows[0]["usd_per_million_output_tokens"]) == pytest.approx(2 / 0.36, rel=1e-5)


def test_choose_by_cost():
    document = _priced(2.0, {"tensor_parallel_size": 2})
    by_throughput, _ = choose(document, ["math"], 0.02)
    by_cost, _ = choose(document, ["math"], 0.02, objective="cost")
    assert by_throughput["math"].variant == "fast"   # fastest, on two GPUs
    assert by_cost["math"].variant == "cheap" and by_cost["math"].score == pytest.approx(2 / 0.72)
    with pytest.raises(ChooseError, match="prices no accelerator-hour"):
        choose(_priced(None), ["math"], 0.02, objective="cost")
