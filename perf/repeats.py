"""A level's figures over its repeats: the median and a 95% interval, and how the interval was computed.

- Several repeats: the median of the repeats' figures, and Student's t interval (repeats - 1 degrees of
  freedom) on their logarithms, back-transformed: run-to-run noise is multiplicative, and this is the
  interval `quant gate` uses for a throughput ratio (benchmarks/interval_coverage.py, section 4: 0.95-0.98
  with 2-5 runs). Widened, where needed, to hold the median.
- One repeat: the interval the requests of that one run allow, which leaves run-to-run noise out (a second
  repeat is what measures that). Throughputs: the run's figure times the relative standard error of its
  requests' mean end-to-end time (in a closed loop the run lasts about as long as its requests take, so the
  throughput scales with its inverse); latency percentiles: the distribution-free interval of that percentile
  from the order statistics of its samples (none above where too few samples lie above it).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.special import bdtr, stdtrit

CONFIDENCE = 0.95
THROUGHPUTS = ("output_tokens_per_s", "requests_per_s", "goodput_rps")
LATENCIES = (("ttft_ms", "p50"), ("ttft_ms", "p99"), ("tpot_ms", "p50"), ("tpot_ms", "p99"), ("e2e_ms", "p99"))
ACROSS = "median of repeats; 95% Student t interval on their logarithms"
WITHIN = "one repeat: 95% interval from its requests (run-to-run noise not included)"


def _figure(point: dict, name: str, stat: str | None = None) -> float | None:
    value = point.get(name)
    if stat is not None:
        value = (value or {}).get(stat)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def across_repeats(values: list[float]) -> dict[str, Any] | None:
    """Median and interval of one figure over k >= 2 repeats (positive values); None when not computable."""
    if len(values) < 2 or min(values) <= 0:
        return None
    logs = np.log(values)
    median = float(np.median(values))
    half = float(stdtrit(len(values) - 1, 0.5 + CONFIDENCE / 2)) * float(logs.std(ddof=1)) / math.sqrt(len(values))
    low, high = math.exp(float(logs.mean()) - half), math.exp(float(logs.mean()) + half)
    return {"median": median, "ci95": [min(low, median), max(high, median)], "repeats": len(values)}


def quantile_interval(samples: list[float], q: float) -> list[float | None]:
    """Distribution-free 95% interval of the q-th quantile: order statistics l < u with
    P(l <= quantile <= u) >= 0.95 under Binomial(n, q); None for an end that does not exist in n samples."""
    x = np.sort(np.asarray(samples, dtype=float))
    n = x.size
    if n == 0:
        return [None, None]
    k = np.arange(n + 1)
    cdf = bdtr(k, n, q)                       # P(count of samples below the quantile <= k)
    alpha = (1 - CONFIDENCE) / 2
    lows, highs = np.nonzero(cdf <= alpha)[0], np.nonzero(cdf >= 1 - alpha)[0]
    low = float(x[lows[-1]]) if lows.size else None     # x[j] (0-based) is the (j+1)-th smallest
    high = float(x[highs[0]]) if highs.size and highs[0] < n else None
    return [low, high]


def _within_throughput(value: float, e2e_s: list[float]) -> list[float] | None:
    if len(e2e_s) < 2 or value <= 0:
        return None
    arr = np.asarray(e2e_s, dtype=float)
    if arr.mean() <= 0:
        return None
    rse = float(arr.std(ddof=1)) / math.sqrt(arr.size) / float(arr.mean())
    half = float(stdtrit(arr.size - 1, 0.5 + CONFIDENCE / 2)) * rse
    return [value * math.exp(-half), value * math.exp(half)]


def _samples(records: list[dict], metric: str) -> list[float]:
    ok = [r for r in records if r.get("error") is None]
    if metric == "ttft_ms":
        return [r["ttft_s"] * 1000 for r in ok if r.get("ttft_s") is not None]
    if metric == "e2e_ms":
        return [r["e2e_s"] * 1000 for r in ok if r.get("e2e_s") is not None]
    return [(r["e2e_s"] - r["ttft_s"]) / (r["output_tokens"] - 1) * 1000 for r in ok
            if r.get("output_tokens") and r["output_tokens"] > 1 and r.get("ttft_s") is not None
            and r.get("e2e_s") is not None]


def summarise_level(points: list[dict], records: list[list[dict]] | None = None) -> dict[str, Any]:
    """The runs of one level (their points, and where kept each run's request records) -> {repeats, method,
    figures: {name: {median, ci95}}}; a latency figure is named like `ttft_ms.p99`."""
    figures: dict[str, Any] = {}
    names = [(n, None) for n in THROUGHPUTS] + list(LATENCIES)
    if len(points) > 1:
        for name, stat in names:
            values = [v for v in (_figure(p, name, stat) for p in points) if v is not None]
            summary = across_repeats(values) if len(values) == len(points) else None
            if summary:
                figures[name if stat is None else f"{name}.{stat}"] = {"median": summary["median"],
                                                                       "ci95": summary["ci95"]}
        return {"repeats": len(points), "method": ACROSS, "figures": figures}
    point, recs = points[0], (records or [[]])[0]
    e2e_s = [r["e2e_s"] for r in recs if r.get("error") is None and r.get("e2e_s") is not None]
    for name, stat in names:
        value = _figure(point, name, stat)
        if value is None:
            continue
        ci = (_within_throughput(value, e2e_s) if stat is None else
              quantile_interval(_samples(recs, name), float(stat[1:]) / 100))
        figures[name if stat is None else f"{name}.{stat}"] = {"median": value, "ci95": ci}
    return {"repeats": 1, "method": WITHIN, "figures": figures}


def level_key(point: dict) -> tuple[str, float]:
    for kind in ("concurrency", "rate", "trace"):
        if kind in point and point[kind] is not None:
            return kind, float(point[kind])
    return "level", 0.0


def summarise_levels(points: list[dict], records: dict[str, list[dict]] | None = None,
                     labels: list[str] | None = None) -> list[dict[str, Any]]:
    """One summary per distinct level, in the order the levels first ran; `labels[i]` names points[i]'s
    records in `records`."""
    groups: dict[tuple[str, float], list[int]] = {}
    for i, point in enumerate(points):
        groups.setdefault(level_key(point), []).append(i)
    out = []
    for (kind, value), at in groups.items():
        recs = [records.get(labels[i], []) for i in at] if records is not None and labels else None
        out.append({kind: int(value) if kind == "concurrency" else value,
                    **summarise_level([points[i] for i in at], recs)})
    return out
