"""Latency/throughput statistics over request records. Pure functions."""

from __future__ import annotations

import math
from dataclasses import asdict, is_dataclass
from typing import Any, Iterable, Mapping

import numpy as np

PERCENTILES = (50, 90, 95, 99, 99.9)


def _as_dict(record: Any) -> Mapping[str, Any]:
    return asdict(record) if is_dataclass(record) else record


def samples_needed(stat: str) -> int:
    """Samples a percentile needs before at least one lies above it (p99: 100, p99.9: 1000); with fewer,
    "p99" is an interpolation towards the maximum, not a 99th percentile. Means and p50 need 1-2."""
    if not stat.startswith("p"):
        return 1
    return math.ceil(100 / (100 - float(stat[1:])) - 1e-9)


def reliable(stats: Mapping[str, Any] | None, stat: str, requests: int | None = None) -> bool:
    """Whether stats[stat] rests on enough samples. Stats written before they carried their own count
    ("n") fall back to `requests` (a point's successful requests); with neither, no."""
    n = (stats or {}).get("n", requests)
    return n is not None and n >= samples_needed(stat)


def stats_ms(values_s: Iterable[float]) -> dict[str, float | None]:
    """mean, std (population, as vLLM's benchmark) and p50/p90/p95/p99/p99.9 in milliseconds (numpy's
    "linear" percentiles), and n, the samples they come from (see `reliable`); None when empty."""
    arr = np.asarray(list(values_s), dtype=float) * 1000.0
    if arr.size == 0:
        return {"mean": None, "std": None, **{f"p{p:g}": None for p in PERCENTILES}, "n": 0}
    out = {"mean": float(arr.mean()), "std": float(arr.std()), "n": int(arr.size)}
    for p in PERCENTILES:
        out[f"p{p:g}"] = float(np.percentile(arr, p, method="linear"))
    return out


def meets_slo(record: Mapping[str, Any], slo: Mapping[str, float]) -> bool:
    """vLLM's --goodput definition: a successful request whose TTFT, TPOT and E2E (ms) are each within the
    SLO's bound, for the bounds the SLO names (keys ttft_ms, tpot_ms, e2e_ms)."""
    if record["error"] is not None:
        return False
    values = {"ttft_ms": record["ttft_s"], "tpot_ms": tpot_s(record), "e2e_ms": record["e2e_s"]}
    for key, bound in slo.items():
        value = values[key]
        if value is not None and value * 1000.0 > bound:
            return False
    return True


def tpot_s(record: Mapping[str, Any]) -> float | None:
    """Time per output token after the first: (e2e - ttft) / (output_tokens - 1)."""
    n, ttft, e2e = record["output_tokens"], record["ttft_s"], record["e2e_s"]
    if n is None or n < 2 or ttft is None or e2e is None:
        return None
    return (e2e - ttft) / (n - 1)


def summarize(records: Iterable[Any], wall_s: float, slo: Mapping[str, float] | None = None) -> dict[str, Any]:
    """Statistics of one run. Latencies use successful requests only; throughputs divide their tokens by
    the wall time of the whole run, and are None (not measured, never 0) where every request failed. With an
    SLO, also goodput (requests/s meeting it) and SLO attainment (the fraction of all requests meeting it).
    Records may be RequestRecords or their dicts."""
    recs = [_as_dict(r) for r in records]
    ok = [r for r in recs if r["error"] is None]
    errors = [r["error"] for r in recs if r["error"] is not None]
    tpots = [t for t in map(tpot_s, ok) if t is not None]
    wall = wall_s if wall_s > 0 and ok else float("nan")   # nothing succeeded: no throughput at all
    out = {
        "n": len(recs),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "wall_s": wall_s,
        "requests_per_s": len(ok) / wall,
        "output_tokens_per_s": sum(r["output_tokens"] or 0 for r in ok) / wall,
        "input_tokens_per_s": sum(r["prompt_tokens"] or 0 for r in ok) / wall,
        "ttft_ms": stats_ms(r["ttft_s"] for r in ok if r["ttft_s"] is not None),
        "tpot_ms": stats_ms(tpots),
        "itl_ms": stats_ms(g for r in ok for g in r["itl_s"]),
        "e2e_ms": stats_ms(r["e2e_s"] for r in ok if r["e2e_s"] is not None),
    }
    if slo:
        good = sum(meets_slo(r, slo) for r in recs)
        out.update(goodput_rps=good / wall, slo_attainment=good / len(recs) if recs else None)
    for name in ("requests_per_s", "output_tokens_per_s", "input_tokens_per_s", "goodput_rps"):
        if name in out and not math.isfinite(out[name]):
            out[name] = None
    lags = [r["lag_s"] for r in recs if r.get("lag_s") is not None]
    if lags:   # open loop only
        out["send_lag_ms"] = stats_ms(lags)
    return out
