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


def test_a_level_runs_at_least_min_seconds_on_fresh_prompts(fake, tokenizer_dir):
    """2 planned requests of 4 tokens (~0.1 s) cannot fill 0.4 s: more are sent, none a repeat of another's
    prompt (a repeat would be served from the prefix cache), the warm-up not counted."""
    wl = Workload(name="short", prompt_tokens=16, output_tokens=4, concurrency=[1], requests_per_level=2,
                  warmup_requests=1, min_seconds=0.4)
    res = run_workload(fake.url, "m", tokenizer_dir, wl)
    (point,) = res["points"]
    assert point["n"] > 2 and point["errors"] == 0 and len(res["records"]["c=1"]) == point["n"]
    measured = [tuple(b["prompt"]) for b in fake.bodies[1:]]
    assert len(measured) == point["n"] and len(set(measured)) == len(measured)
    assert point["wall_s"] >= 0.4   # the budget's own guarantee, not a speed


def test_a_level_stops_sending_at_max_seconds_and_says_so(fake, tokenizer_dir):
    """200 planned requests of 4 tokens, one at a time, cannot end within 0.3 s: the level stops sending there,
    keeps what it measured, and its warning says how many were sent. An open loop keeps its arrivals within it."""
    wl = Workload(name="long", prompt_tokens=16, output_tokens=4, concurrency=[1], requests_per_level=200,
                  warmup_requests=0, max_seconds=0.3)
    res = run_workload(fake.url, "m", tokenizer_dir, wl)
    (point,) = res["points"]
    assert 1 <= point["n"] < 200 and point["errors"] == 0 and len(fake.bodies) == point["n"]
    assert f"c=1: stopped at max_seconds 0.3: {point['n']} of 200 planned requests sent" in res["warnings"]
    fake.bodies.clear()
    rate = Workload(name="open", arrival="constant", rates=[20], prompt_tokens=16, output_tokens=2,
                    requests_per_level=100, warmup_requests=0, max_seconds=0.5)
    res = run_workload(fake.url, "m", tokenizer_dir, rate)
    assert res["points"][0]["n"] == len(fake.bodies) == 11   # arrivals at 0, 0.05, ... 0.5 s
    assert "rate=20/s: stopped at max_seconds 0.5: 11 of 100 planned requests sent" in res["warnings"]
