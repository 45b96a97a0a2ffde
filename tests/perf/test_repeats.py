"""Repeated perf levels: every repeat sends prompts no earlier run sent (a prefix cache would serve a repeat of
them), and each level carries its median and interval over its repeats, or from its requests with one."""

from __future__ import annotations

import math

import pytest

from core.recipe_perf import Workload
from core.results import WorkloadResult
from perf.repeats import across_repeats, quantile_interval, summarise_level
from perf.requests import level_seed
from perf.run import run_workload


def _prompts(bodies) -> list[tuple]:
    return [tuple(b["prompt"]) if isinstance(b["prompt"], list) else (b["prompt"],) for b in bodies]


def test_each_repeat_sends_fresh_prompts_and_levels_carry_medians(fake, tokenizer_dir):
    wl = Workload(name="r", prompt_tokens=16, output_tokens=4, concurrency=[1, 2], requests_per_level=3,
                  warmup_requests=1, repeats=3)
    res = run_workload(fake.url, "m", tokenizer_dir, wl)
    assert [(p["concurrency"], p.get("repeat", 0)) for p in res["points"]] == \
        [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2)]
    assert set(res["records"]) == {"c=1", "c=1 #2", "c=1 #3", "c=2", "c=2 #2", "c=2 #3"}
    prompts = _prompts(fake.bodies)
    assert len(prompts) == 6 * 4 and len(set(prompts)) == len(prompts)   # warm-ups included: none sent twice
    levels = WorkloadResult.model_validate(res).levels
    assert [(lv.concurrency, lv.repeats) for lv in levels] == [(1, 3), (2, 3)]
    tok = levels[1].figures["output_tokens_per_s"]
    runs = sorted(p["output_tokens_per_s"] for p in res["points"] if p["concurrency"] == 2)
    assert tok.median == runs[1] and tok.ci95[0] <= runs[1] <= tok.ci95[1]
    assert "Student t" in levels[1].method


def test_a_level_listed_twice_is_a_repeat_with_fresh_prompts(fake, tokenizer_dir):
    wl = Workload(name="twice", prompt_tokens=16, output_tokens=4, concurrency=[2, 2], requests_per_level=4,
                  warmup_requests=0)
    res = run_workload(fake.url, "m", tokenizer_dir, wl)
    assert len(set(_prompts(fake.bodies))) == 8 and res["levels"][0]["repeats"] == 2


def test_the_first_runs_seed_is_the_one_before_repeats():
    assert level_seed(7, 8) == [7, 8000] and level_seed(7, 8, 0) == [7, 8000]
    assert len({tuple(level_seed(7, 8, r)) for r in range(5)}) == 5


def test_one_repeat_gives_an_interval_from_its_requests():
    records = [{"error": None, "ttft_s": 0.01 * (1 + i % 5), "e2e_s": 0.1 + 0.01 * (i % 7), "output_tokens": 8}
               for i in range(40)]
    point = {"concurrency": 4, "output_tokens_per_s": 300.0, "requests_per_s": 40.0,
             "ttft_ms": {"p50": 30.0, "p99": 50.0}, "tpot_ms": {"p50": 10.0, "p99": 12.0}, "e2e_ms": {"p99": 160.0}}
    summary = summarise_level([point], [records])
    assert summary["repeats"] == 1 and "run-to-run noise not included" in summary["method"]
    low, high = summary["figures"]["output_tokens_per_s"]["ci95"]
    assert low < 300 < high and high / low < 1.2
    assert summary["figures"]["ttft_ms.p99"]["ci95"][1] is None     # 40 samples: nothing reliably above a p99


def test_across_repeats_is_a_t_interval_on_the_logs():
    from scipy.stats import t

    values = [1000.0, 950.0, 1040.0]
    s = across_repeats(values)
    logs = [math.log(v) for v in values]
    mean = sum(logs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2)
    half = t.ppf(0.975, 2) * sd / math.sqrt(3)
    assert s["median"] == 1000.0 and s["ci95"] == pytest.approx([math.exp(mean - half), math.exp(mean + half)])
    assert across_repeats([1000.0]) is None


def test_quantile_interval_holds_its_coverage():
    import numpy as np

    rng = np.random.default_rng(0)
    hits = 0
    for _ in range(2000):
        low, high = quantile_interval(rng.exponential(1.0, 60).tolist(), 0.5)
        hits += low <= math.log(2) <= high
    assert 0.94 <= hits / 2000 <= 0.99
