"""perf/loadgen, prompts, lengths and arrivals, against an in-test SSE fake of vLLM."""

from __future__ import annotations

import asyncio

import pytest

from perf.loadgen import run_closed_loop
from perf.run import _warnings, arrived_in_one_burst, run_workload
from core.recipe_perf import Workload
from tests.helpers import not_about_foreign_load
from tests.perf.fake_vllm import GAP_S


def test_loadgen_streams_and_records(fake):
    prompts = [[1] * 12, [7] * 12, [500, 1], [501, 1], [502, 1], [1] * 12]
    recs = asyncio.run(run_closed_loop(fake.url + "/v1/completions", "m", prompts, output_tokens=6, concurrency=3))
    assert len(recs) == 6 and fake.max_in_flight == 3
    body = fake.bodies[0]
    assert body["ignore_eos"] is True and body["stream"] is True and body["temperature"] == 0
    assert body["stream_options"] == {"include_usage": True} and body["max_tokens"] == 6
    for r in (recs[0], recs[1], recs[5]):
        assert r.error is None and r.prompt_tokens == 12 and r.output_tokens == 6 and len(r.itl_s) == 5
        assert 0 < r.ttft_s < r.e2e_s and sum(r.itl_s) <= r.e2e_s - r.ttft_s + 1e-9
    assert recs[0].chunks == 6 and recs[1].chunks == 5
    assert recs[1].itl_s[0] == recs[1].itl_s[1]   # one two-token chunk: its gap is shared by both tokens
    assert recs[2].error.startswith("HTTP 500") and "kernel exploded" in recs[2].error
    assert recs[3].error == "stream error: engine died"
    assert recs[4].error is not None and recs[4].output_tokens == 2


@pytest.mark.exclusive_cpu   # times measured by this process: a busy neighbour shifts them
def test_a_stream_delivered_in_one_burst_measures_no_decode_time(fake):
    prompts = [[1] * 12, [503] * 12, [1] * 12, [503] * 12]
    recs = asyncio.run(run_closed_loop(fake.url + "/v1/completions", "m", prompts, output_tokens=10, concurrency=1))
    assert all(r.error is None and r.chunks == 10 for r in recs)
    spans = [r.e2e_s - r.ttft_s for r in recs]
    # streamed: nine gaps of GAP_S (bounds loose enough for a late first read); a burst is parsed from one
    # buffer, but the fake's thread shares our GIL, so the bound is one gap, not the flag's 1 ms (its
    # threshold is tested on exact numbers below)
    assert spans[0] > 5 * GAP_S and spans[2] > 5 * GAP_S
    assert spans[1] < GAP_S and spans[3] < GAP_S


def test_responses_under_a_tenth_of_a_millisecond_per_chunk_are_flagged_as_bursts():
    assert arrived_in_one_burst(0.00099, 10) and not arrived_in_one_burst(0.00101, 10)
    assert not arrived_in_one_burst(0.0, 7)   # too few chunks to tell a burst from a fast engine
    plan = [type("Planned", (), {"prompt": [1] * 12, "output_tokens": 10})] * 4
    records = [{"error": None, "prompt_tokens": 12, "output_tokens": 10, "chunks": 10, "ttft_s": 0.05,
                "e2e_s": 0.05 + span} for span in (0.18, 0.0004, 0.0011, 0.0)]
    (warning,) = _warnings("c=1", records, plan, {})
    assert warning.startswith("c=1: 2 of 4 streamed responses arrived in one burst")
    assert _warnings("c=1", [dict(r, error="HTTP 500") for r in records], plan, {}) == []   # failed ones don't count


def test_no_collector_pass_while_requests_are_timed():
    import gc

    from perf.loadgen import no_gc_pauses

    enabled = gc.isenabled()
    with no_gc_pauses():
        assert not gc.isenabled() and gc.get_freeze_count() > 0   # what existed is out of any later pass
    assert gc.isenabled() == enabled and gc.get_freeze_count() == 0


def synthetic_prompts(tokenizer_dir, n: int, prompt_tokens: int, seed: int) -> list[list[int]]:
    import numpy as np

    from perf.prompts import PromptMaker

    maker, rng = PromptMaker(tokenizer_dir), np.random.default_rng(seed)
    return [maker.make(prompt_tokens, rng) for _ in range(n)]


def test_synthetic_prompts_exact_and_deterministic(tokenizer_dir):
    a = synthetic_prompts(tokenizer_dir, 5, 40, seed=1)
    assert a == synthetic_prompts(tokenizer_dir, 5, 40, seed=1) and a != synthetic_prompts(tokenizer_dir, 5, 40, seed=2)
    assert all(len(p) == 40 and p[0] == 0 for p in a)      # BOS (id 0) counted in the 40
    assert all(t > 2 for p in a for t in p[1:])             # no <s>, </s>, <pad> in the body
    assert len({tuple(p) for p in a}) == 5


@pytest.mark.exclusive_cpu   # times measured by this process: a busy neighbour shifts them
def test_open_loop_dirty_profile_sends_what_it_planned(fake, tokenizer_dir):
    from perf.prompts import PromptMaker
    from perf.requests import plan_level

    wl = Workload(name="dirty", arrival="poisson", rates=[40], requests_per_level=20, warmup_requests=0,
                  prompt_tokens={"dist": "lognormal", "mean": 40, "sigma": 0.4, "min": 8, "max": 120},
                  output_tokens={"dist": "uniform", "min": 3, "max": 9},
                  long_prompts={"fraction": 0.05, "tokens": 300}, bursts={"fraction": 0.2, "size": 4},
                  shared_prefix={"fraction": 0.5, "tokens": 6})
    plan = plan_level(wl, "rate", 40, PromptMaker(tokenizer_dir), seed=0)
    assert len(plan) == 24 and [p.kind for p in plan].count("burst") == 4
    assert [p.kind for p in plan].count("long") == 1 and max(len(p.prompt) for p in plan) == 300
    res = run_workload(fake.url, "m", tokenizer_dir, wl)
    (point,) = res["points"]
    assert point["rate"] == 40 and point["n"] == 24 and point["errors"] == 0 and not_about_foreign_load(res["warnings"]) == []
    # exactly the planned requests: prompt ids and output lengths (the seed makes the plan reproducible)
    assert sorted((b["prompt"], b["max_tokens"]) for b in fake.bodies) == sorted((p.prompt, p.output_tokens)
                                                                                 for p in plan)
    # an open loop does not wait for answers: 6 tokens x 20 ms per request vs 25 ms between arrivals
    assert fake.max_in_flight >= 4
    assert point["send_lag_ms"]["p99"] < 50                 # the client kept to the schedule
    kinds = {r["kind"] for r in res["records"]["rate=40/s"]}
    assert kinds == {"base", "long", "burst"}


def test_trace_replay_keeps_arrival_gaps_and_lengths(fake, tokenizer_dir, tmp_path):
    trace = tmp_path / "gateway.jsonl"
    trace.write_text('{"timestamp": "2026-11-30T10:00:00.000", "input_tokens": 12, "output_tokens": 3}\n'
                     '{"timestamp": "2026-11-30T10:00:00.200", "input_tokens": 30, "output_tokens": 5}\n'
                     '{"timestamp": "2026-11-30T10:00:00.400", "input_tokens": 20, "output_tokens": 4}\n')
    wl = Workload(name="replay", trace=str(trace), trace_speedup=2.0, warmup_requests=0)
    res = run_workload(fake.url, "m", tokenizer_dir, wl)
    (point,) = res["points"]
    assert point["trace"] == 2.0 and point["n"] == 3 and point["errors"] == 0
    assert point["offered_rps"] == pytest.approx(10.0)      # 0.2 s gaps replayed twice as fast
    assert sorted((len(b["prompt"]), b["max_tokens"]) for b in fake.bodies) == [(12, 3), (20, 4), (30, 5)]


def test_length_distributions_and_arrivals():
    import numpy as np

    from perf.arrivals import arrival_offsets
    from perf.lengths import sample_lengths
    from core.recipe_perf import Lengths

    rng = np.random.default_rng(0)
    logn = sample_lengths(Lengths(dist="lognormal", mean=200, sigma=0.6), 20_000, rng)
    assert abs(np.mean(logn) - 200) < 5 and min(logn) >= 1
    clipped = sample_lengths(Lengths(dist="normal", mean=50, std=40, min=10, max=80), 5000, rng)
    assert min(clipped) == 10 and max(clipped) == 80
    assert set(sample_lengths(Lengths(dist="empirical", values=[7, 9]), 100, rng)) == {7, 9}
    poisson = np.diff(arrival_offsets("poisson", 50, 20_000, rng))
    assert abs(poisson.mean() - 0.02) < 0.001 and abs(poisson.std() / poisson.mean() - 1) < 0.05
    bursty = np.diff(arrival_offsets("gamma", 50, 20_000, rng, burstiness=0.25))
    assert abs(bursty.mean() - 0.02) < 0.002 and bursty.std() / bursty.mean() > 1.8   # CV = 1/sqrt(0.25)
    assert arrival_offsets("constant", 4, 3, rng) == [0.0, 0.25, 0.5]
