"""A malformed recipe fails before any work, with one message naming the field (and line)."""

import subprocess
import sys

import pytest

from core.recipe import RecipeError, load_recipe, parse_recipe
from tests.helpers import REPO

GOOD = """\
name: t
model: demo
variants:
  - name: bf16
    baseline: true
  - name: q
    scheme: W4A16
    algorithm: gptq
tasks: [demo_math]
"""


def test_shipped_recipes_are_valid():
    for path in (REPO / "recipes").glob("*.yaml"):
        recipe = load_recipe(path)
        assert recipe.baseline.name


def test_good_recipe_defaults():
    r = parse_recipe(GOOD)
    assert r.variant("q").ignore == ["lm_head"]
    assert r.tasks[0].name == "demo_math"
    assert r.perf.workloads[0].concurrency == [1, 4, 16]
    assert r.engine.engine_core_nice == 10


@pytest.mark.parametrize("text, expected", [
    (GOOD.replace("algorithm: gptq", "algorithm: magic"), ":8: variants.1.algorithm: Input should be"),
    (GOOD.replace("    scheme: W4A16\n", "    scheme: W4A16\n    shceme: x\n"), ":8: variants.1.shceme: unknown field"),
    (GOOD.replace("model: demo\n", ""), "model: Field required"),
    (GOOD.replace("    baseline: true\n", ""), "exactly one variant needs `baseline: true`"),
    (GOOD.replace("name: q", "name: bf16"), "duplicate names ['bf16']"),
    (GOOD + "perf: {workloads: [{name: w, concurrency: [0]}]}\n", "perf.workloads.0.concurrency"),
    (GOOD.replace("tasks: [demo_math]", "tasks: [demo_math"), "not valid YAML"),
    ("- just\n- a list\n", "a recipe is a YAML mapping"),
    (GOOD + "engine: {engine_core_nice: -5}\n", "engine.engine_core_nice: Input should be greater than or equal to 0"),
])
def test_bad_recipes_name_the_field(text, expected):
    with pytest.raises(RecipeError) as err:
        parse_recipe(text, "r.yaml")
    assert expected in str(err.value)
    assert "\n" not in str(err.value)


def test_cli_reports_one_line_not_a_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("algorithm: gptq", "algorithm: magic"))
    proc = subprocess.run([sys.executable, "-m", "quant.cli", "sweep", str(bad), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith("sweep error:") and "variants.1.algorithm" in proc.stderr
    assert not (tmp_path / "o").exists()


def test_missing_recipe_file(tmp_path):
    with pytest.raises(RecipeError, match="no such recipe file"):
        load_recipe(tmp_path / "nope.yaml")


def test_workload_profiles_validate_with_one_clear_message():
    from core.recipe import RecipeError, parse_recipe

    head = "name: x\nmodel: demo\nvariants: [{name: bf16, baseline: true}]\ntasks: [demo_math]\nperf:\n  workloads:\n"
    with pytest.raises(RecipeError, match=r"r.yaml:7: perf.workloads.0: arrival poisson needs rates"):
        parse_recipe(head + "    - {name: p, arrival: poisson}\n", "r.yaml")
    with pytest.raises(RecipeError, match=r"perf.workloads.0.*dist lognormal needs sigma"):
        parse_recipe(head + "    - {name: q, prompt_tokens: {dist: lognormal, mean: 100}}\n", "r.yaml")
    with pytest.raises(RecipeError, match=r"bursts needs size"):
        parse_recipe(head + "    - {name: b, arrival: gamma, rates: [2], bursts: {fraction: 0.1}}\n", "r.yaml")
    ok = parse_recipe(head + "    - {name: g, arrival: gamma, rates: [1, 2], burstiness: 0.5}\n", "r.yaml")
    assert ok.perf.workloads[0].levels() == [("rate", 1.0), ("rate", 2.0)]
