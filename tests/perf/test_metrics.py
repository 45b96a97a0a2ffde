"""perf/metrics: latency percentiles, goodput, and the server's own counters."""

from __future__ import annotations

import pytest

from perf.loadgen import RequestRecord
from perf.metrics import reliable, samples_needed, summarize


def _rec(ttft: float, e2e: float, out: int, itl: list[float], error: str | None = None) -> RequestRecord:
    return RequestRecord(start=0.0, ttft_s=ttft, itl_s=itl, e2e_s=e2e, prompt_tokens=10, output_tokens=out,
                         error=error)


def test_summarize_exact_percentiles():
    recs = [_rec(0.010, 0.110, 11, [0.01] * 10), _rec(0.020, 0.220, 11, [0.02] * 10),
            _rec(0.030, 0.330, 11, [0.03] * 10), _rec(0.040, 0.440, 11, [0.04] * 10),
            _rec(0.5, 9.0, 0, [], error="HTTP 500: boom")]
    s = summarize(recs, wall_s=2.0)
    assert (s["n"], s["errors"], s["first_error"]) == (5, 1, "HTTP 500: boom")
    # ttft ms = [10, 20, 30, 40]; linear: p90 at rank 2.7 -> 37, p99 at rank 2.97 -> 39.7
    # p95 at rank 2.85 -> 38.5, p99.9 at rank 2.997 -> 39.97
    # std: population (numpy's default, as vLLM's benchmark): sqrt(125) ms
    assert s["ttft_ms"] == pytest.approx({"mean": 25.0, "std": 125 ** 0.5, "p50": 25.0, "p90": 37.0, "p95": 38.5, "p99": 39.7,
                                          "p99.9": 39.97, "n": 4})
    # tpot = (e2e - ttft) / 10 = [10, 20, 30, 40] ms
    assert s["tpot_ms"]["p99"] == pytest.approx(39.7)
    # itl pooled: ten each of 10, 20, 30, 40 ms -> p90 = 40 (rank 35.1 lies in the 40s)
    assert s["itl_ms"] == pytest.approx({"mean": 25.0, "std": 125 ** 0.5, "p50": 25.0, "p90": 40.0, "p95": 40.0, "p99": 40.0,
                                         "p99.9": 40.0, "n": 40})
    assert s["e2e_ms"]["p90"] == pytest.approx(407.0) and s["e2e_ms"]["p99"] == pytest.approx(436.7)
    assert "goodput_rps" not in s
    assert s["requests_per_s"] == pytest.approx(2.0)
    # 4 requests carry a p50 but no p99: it is recorded with its n, and `reliable` says so
    assert reliable(s["ttft_ms"], "p50") and not reliable(s["ttft_ms"], "p99")
    assert reliable(s["itl_ms"], "p90") and not reliable(s["itl_ms"], "p99")
    assert (samples_needed("p99"), samples_needed("p99.9"), samples_needed("mean")) == (100, 1000, 1)
    assert s["output_tokens_per_s"] == pytest.approx(22.0)
    assert s["input_tokens_per_s"] == pytest.approx(20.0)


def test_goodput_counts_requests_within_every_named_bound():
    recs = [_rec(0.010, 0.110, 11, [0.01] * 10), _rec(0.020, 0.220, 11, [0.02] * 10),
            _rec(0.030, 0.330, 11, [0.03] * 10), _rec(0.040, 0.440, 11, [0.04] * 10),
            _rec(0.5, 9.0, 0, [], error="HTTP 500: boom")]
    s = summarize(recs, wall_s=2.0, slo={"ttft_ms": 35, "tpot_ms": 25})   # only the first two meet both
    assert s["goodput_rps"] == pytest.approx(1.0) and s["slo_attainment"] == pytest.approx(0.4)
    assert summarize(recs, 2.0, slo={"e2e_ms": 1000})["slo_attainment"] == pytest.approx(0.8)


def test_summarize_all_failed_and_single_token():
    s = summarize([_rec(0.1, 0.1, 1, [])], wall_s=1.0)
    assert s["tpot_ms"]["p50"] is None and s["ttft_ms"]["p50"] == pytest.approx(100.0)
    s = summarize([_rec(0.1, 0.2, 0, [], error="x")], wall_s=1.0)
    assert s["errors"] == 1 and s["requests_per_s"] is None and s["e2e_ms"]["mean"] is None   # not measured, not 0


def test_server_counters_parse_and_crosscheck():
    from perf.server_metrics import crosscheck, parse_counters

    text = ('# HELP vllm:generation_tokens_total Number of generation tokens processed.\n'
            '# TYPE vllm:generation_tokens_total counter\n'
            'vllm:generation_tokens_total{engine="0",model_name="m"} 120.0\n'
            'vllm:generation_tokens_created{engine="0",model_name="m"} 1.7e+09\n'
            'vllm:prompt_tokens_total{engine="0",model_name="m"} 400.0\n'
            'vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 3.0\n'
            'vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 1.0\n'
            'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.01",model_name="m"} 3.0\n'
            'vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 4.0\n'
            'vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.05\n')
    before = parse_counters(text)
    assert before == {"generation_tokens": 120.0, "prompt_tokens": 400.0, "requests": 4.0, "ttft_count": 4.0,
                      "ttft_sum": 0.05}
    after = {"generation_tokens": 184.0, "prompt_tokens": 528.0, "requests": 5.0, "ttft_count": 6.0, "ttft_sum": 0.075}
    check = crosscheck(before, after, client_output_tokens=64, client_prompt_tokens=128)
    assert check["match"] and check["server_requests"] == 1 and check["server_prompt_tokens"] == 128
    assert check["server_ttft_ms_mean"] == pytest.approx(12.5) and "server_itl_ms_mean" not in check
    assert not crosscheck(before, after, 63, 128)["match"]
    assert crosscheck(None, after, 64, 128) is None   # a server without /metrics: no check, no failure
