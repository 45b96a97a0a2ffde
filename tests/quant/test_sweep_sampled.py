"""A sampled task with a reasoning trace through a whole sweep on the stand-in engine (tests/standin_engine.py):
results.json carries its sampled figures and reasoning tokens through the typed schema, the per-item file every
sample, lm-eval's own results file the sampled metrics."""

from __future__ import annotations

import json

from core.results import Results
from tests.quant.test_sweep_standin import sweep

RECIPE = """\
name: sampled
model: demo
engine: {args: {max_model_len: 512}}
variants: [{name: bf16, baseline: true}]
tasks:
  - {name: demo_math, limit: 3, repeats: 2, gen_kwargs: {do_sample: true, temperature: 0.8},
     reasoning: {tags: ["<think>", "</think>"]}}
kl_items: 0
perf: {workloads: []}
"""


def test_a_sampled_reasoning_task_is_recorded_through_the_sweep(tmp_path, standin_engine):
    results = Results.of(sweep(tmp_path, RECIPE))
    accuracy = results.variants["bf16"].accuracy["demo_math"]
    assert accuracy.sampling.repeats == 2 and accuracy.sampling.metric == "exact_match,none"
    assert accuracy.sampling.pass_at.keys() == {"1", "2"} and accuracy.sampling.no_answer.value == 0
    assert accuracy.value == accuracy.sampling.avg.value and accuracy.n == 3
    assert accuracy.reasoning_tokens.value == 0   # the stand-in answers without a trace
    variant = tmp_path / "run" / "variants" / "bf16"
    records = [json.loads(line) for line in (variant / "evals" / "demo_math.jsonl").read_text().splitlines()]
    assert all(len(r["resps"][0]) == 2 and r["reasoning"] == ["", ""] for r in records)
    [lm_eval_results] = variant.glob("lm_eval/*/results_*.json")
    assert "avg@2,none" in json.loads(lm_eval_results.read_text())["results"]["demo_math"]
