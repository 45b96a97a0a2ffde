"""Flatten results.json into per-task rows and mark the Pareto frontier."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from reports.metric_kinds import higher_is_better
from reports.samples import ItemFileError, ItemMismatch, paired_between


@dataclass
class Row:
    variant: str
    status: str
    backend: str
    accuracy: float | None
    ci95: tuple[float, float] | None
    n: int
    delta: float | None
    out_tok_s: float | None
    ttft_p99_ms: float | None
    tpot_p99_ms: float | None
    e2e_p99_ms: float | None
    size_bytes: int | None
    rss_bytes: int | None
    p99_samples: int | None = None   # fewest samples behind the p99 columns (< 100: marked, not a p99)
    gpu_bytes: int | None = None  # device memory the server held (CUDA)
    kv_bytes_per_token: int | None = None
    max_sequences: int | None = None   # of the first workload's length, in the KV cache beside the weights
    paired: dict | None = None   # against the baseline on the same items (evals.stats.paired_difference)
    kl: float | None = None      # mean KL of next-token distributions against the baseline (evals.kl)
    goodput_rps: float | None = None        # at the headline point, under the recipe's SLO
    max_rate_meeting_slo: float | None = None  # from a workload's rate search
    pareto: bool = False


def headline_point(variant: dict) -> dict | None:
    """The perf point a table shows: the highest concurrency of the first closed-loop workload."""
    points = headline_points(variant)
    return points[0] if points else None


def headline_points(variant: dict) -> list[dict]:
    """Every run of the headline level (a workload may list a level several times to repeat it)."""
    for workload in variant.get("perf", {}).values():
        points = [p for p in workload.get("points") or [] if "concurrency" in p]
        if points:
            top = max(p["concurrency"] for p in points)
            return [p for p in points if p["concurrency"] == top]
    return []


def p99_samples(point: dict | None) -> int | None:
    """The fewest samples behind the point's TTFT/TPOT/E2E p99 (see perf.metrics.reliable)."""
    if not point:
        return None
    requests = point["n"] - point.get("errors", 0) if "n" in point else None
    counts = [(point.get(k) or {}).get("n", requests) for k in ("ttft_ms", "tpot_ms", "e2e_ms")]
    return min((c for c in counts if c is not None), default=None)


def max_rate_meeting_slo(variant: dict) -> float | None:
    """The highest request rate a workload's rate search found to meet the SLO (the first such workload)."""
    return next((w["max_rate_meeting_slo"] for w in variant.get("perf", {}).values()
                 if w.get("max_rate_meeting_slo") is not None), None)


def headline_concurrency(results: dict) -> int | None:
    for v in results["variants"].values():
        point = headline_point(v)
        if point:
            return point["concurrency"]
    return None


def memory_target(results: dict) -> str:
    """e.g. "80 GiB x 0.9": the accelerator the max-sequences column is computed for."""
    for v in results["variants"].values():
        m = v.get("memory", {})
        if "accelerator_gib" in m:
            return f"{m['accelerator_gib']:g} GiB x {m['utilization']:g}"
    return "-"


def tasks_of(results: dict) -> list[str]:
    seen: list[str] = []
    for v in results["variants"].values():
        seen += [t for t in v.get("accuracy", {}) if t not in seen]
    return seen


def metric_of(results: dict, task: str) -> str:
    return next((v["accuracy"][task]["metric"] for v in results["variants"].values()
                 if task in v.get("accuracy", {})), "accuracy")


def paired_vs_baseline(results: dict, run_dir: Path | None, variant: str, task: str, entry: dict) -> dict | None:
    if run_dir is None or variant == results["baseline"]:
        return None
    try:
        return paired_between(run_dir, results["baseline"], run_dir, variant, task, entry["metric"],
                              higher_is_better=higher_is_better(entry))
    except (ItemMismatch, ItemFileError):   # a report still renders; `quant gate` says what is wrong
        return None


def rows_for_task(results: dict, task: str, run_dir: Path | None = None) -> list[Row]:
    base = results["variants"].get(results["baseline"], {}).get("accuracy", {}).get(task)
    rows = []
    for name, v in results["variants"].items():
        acc = v.get("accuracy", {}).get(task)
        point = headline_point(v)
        latency = lambda key: (point.get(key) or {}).get("p99") if point else None
        rows.append(Row(
            variant=name, status=v["status"], backend=(acc or {}).get("backend", "-"),
            accuracy=acc["value"] if acc else None, ci95=tuple(acc["ci95"]) if acc else None,
            n=acc["n"] if acc else 0,
            delta=(acc["value"] - base["value"]) if acc and base else None,
            out_tok_s=point["output_tokens_per_s"] if point else None,
            ttft_p99_ms=latency("ttft_ms"), tpot_p99_ms=latency("tpot_ms"), e2e_p99_ms=latency("e2e_ms"),
            p99_samples=p99_samples(point),
            size_bytes=v.get("size_bytes"), rss_bytes=v.get("memory", {}).get("server_rss_bytes"),
            gpu_bytes=v.get("memory", {}).get("server_gpu_bytes"),
            kv_bytes_per_token=v.get("memory", {}).get("kv_bytes_per_token"),
            max_sequences=v.get("memory", {}).get("max_sequences"),
            paired=paired_vs_baseline(results, run_dir, name, task, acc) if acc else None,
            kl=(acc.get("kl") or {}).get("value") if acc else None,
            goodput_rps=point.get("goodput_rps") if point else None,
            max_rate_meeting_slo=max_rate_meeting_slo(v)))
    mark_pareto(rows)
    return rows


def _objectives(row: Row) -> tuple[float, float, float, float]:
    """All maximised; a missing value is the worst possible."""
    inf = float("inf")
    return (row.accuracy if row.accuracy is not None else -1.0,
            row.out_tok_s if row.out_tok_s is not None else -1.0,
            -(row.e2e_p99_ms if row.e2e_p99_ms is not None else inf),
            -(row.size_bytes if row.size_bytes is not None else inf))


def mark_pareto(rows: list[Row]) -> None:
    """Pareto-optimal over accuracy (up), output throughput (up), p99 end-to-end latency (down) and
    size (down), among served rows."""
    candidates = [r for r in rows if r.accuracy is not None and r.out_tok_s is not None]
    for r in candidates:
        a = _objectives(r)
        r.pareto = not any(all(x >= y for x, y in zip(_objectives(o), a)) and _objectives(o) != a
                           for o in candidates if o is not r)
