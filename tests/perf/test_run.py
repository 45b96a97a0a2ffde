"""perf/run: the workload runner's levels, warm-up and progress, and the rate search."""

from __future__ import annotations

import asyncio

import pytest

from perf.run import run_workload
from core.recipe_perf import Workload
from tests.helpers import not_about_foreign_load
from tests.perf.fake_vllm import GAP_S


def test_run_workload_levels_warmup_progress(fake, tokenizer_dir):
    seen = []
    wl = Workload(name="tiny", prompt_tokens=16, output_tokens=4, concurrency=[1, 2], requests_per_level=3,
                  warmup_requests=2)
    res = run_workload(fake.url, "m", tokenizer_dir, wl, progress=lambda d, t: seen.append((d, t)))
    assert [p["concurrency"] for p in res["points"]] == [1, 2]
    assert all(p["n"] == 3 and p["errors"] == 0 and p["requests_per_s"] > 0 for p in res["points"])
    assert {c: len(r) for c, r in res["records"].items()} == {"c=1": 3, "c=2": 3}
    assert len(fake.bodies) == 10 and seen[-1] == (10, 10) and not_about_foreign_load(res["warnings"]) == []
    assert res["points"][0]["tpot_ms"]["p50"] >= GAP_S * 1000 * 0.8   # the fake sleeps GAP_S per token


@pytest.mark.exclusive_cpu   # times measured by this process: a busy neighbour shifts them
def test_rate_search_finds_the_knee_of_a_one_at_a_time_server(fake, tokenizer_dir):
    # Served one at a time, 2 tokens x 20 ms each: up to ~25 req/s no request waits; above it the queue grows
    # by (40 ms - 1/rate) per request, so 16 evenly spaced requests keep E2E <= 200 ms up to ~38 req/s.
    fake.capacity = asyncio.Semaphore(1)
    wl = Workload(name="knee", arrival="constant", requests_per_level=16, warmup_requests=0, prompt_tokens=8,
                  output_tokens=2, rate_search={"low": 8, "high": 128, "probes": 3, "attainment": 0.9})
    res = run_workload(fake.url, "m", tokenizer_dir, wl, slo={"e2e_ms": 200})
    rates = [p["rate"] for p in res["points"]]
    assert rates[:2] == [8, 128] and len(rates) == 5
    assert res["points"][0]["slo_attainment"] == 1.0 and res["points"][1]["slo_attainment"] < 0.9
    assert 16 <= res["max_rate_meeting_slo"] <= 45
