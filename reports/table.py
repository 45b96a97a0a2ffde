"""Flatten results.json into per-task rows and mark the Pareto frontier."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.results import Accuracy, PerfPoint, Results, VariantRecord
from reports import kv_memory
from reports.cost import usd_per_million_tokens
from reports.headline import failed_requests, foreign_cores, headline_figure, headline_point
from reports.metric_kinds import higher_is_better
from reports.ratios import length_ratio, recovery
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
    foreign_cores: float | None = None   # other processes' CPU at a headline run measured under foreign load
    gpu_bytes: int | None = None  # device memory the server held (CUDA)
    kv_bytes_per_token: int | None = None
    max_sequences: int | None = None   # of the first workload's length, in the KV cache beside the weights
    kv_measured: bool = False          # KV/tok and max seqs are the engine's own (reports/kv_memory.py)
    engine_kv_tokens: int | None = None   # the KV cache the engine reported at start-up, in tokens
    paired: dict | None = None   # against the baseline on the same items (evals.stats.paired_difference)
    kl: float | None = None      # mean KL of next-token distributions against the baseline (evals.kl)
    goodput_rps: float | None = None        # at the headline point, under the recipe's SLO
    max_rate_meeting_slo: float | None = None  # from a workload's rate search
    recovery: float | None = None      # quantized / baseline score (reports.ratios)
    top1: float | None = None          # top-1 next-token agreement with the baseline, beside the KL
    length_ratio: float | None = None  # mean generated tokens relative to the baseline's
    usd_per_mtok: float | None = None  # dollars per million output tokens at the headline point (reports.cost)
    tok_s_ci: tuple | None = None      # out_tok_s's 95% interval (perf/repeats.py: across repeats, or within one)
    repeats: int | None = None         # runs of the headline level behind out_tok_s (its median where several)
    failed: tuple[int, int] | None = None   # (failed, sent) requests of the headline level behind the perf columns
    pareto: bool = False


def p99_samples(point: PerfPoint | None) -> int | None:
    """The fewest samples behind the point's TTFT/TPOT/E2E p99 (see perf.metrics.reliable)."""
    if not point:
        return None
    requests = point.n - (point.errors or 0) if point.n is not None else None
    latencies = (point.ttft_ms, point.tpot_ms, point.e2e_ms)
    counts = [stats.n if stats is not None and "n" in stats.model_fields_set else requests for stats in latencies]
    return min((c for c in counts if c is not None), default=None)


def max_rate_meeting_slo(variant: VariantRecord) -> float | None:
    """The highest request rate a workload's rate search found to meet the SLO (the first such workload)."""
    return next((w.max_rate_meeting_slo for w in variant.perf.values() if w.max_rate_meeting_slo is not None), None)


def headline_concurrency(results: Results) -> int | None:
    for v in results.variants.values():
        point = headline_point(v)
        if point:
            return point.concurrency
    return None


def memory_target(results: Results) -> str:
    """e.g. "80 GiB x 0.9": the accelerator the max-sequences column is computed for."""
    for v in results.variants.values():
        if v.memory.accelerator_gib is not None:
            return f"{v.memory.accelerator_gib:g} GiB x {v.memory.utilization:g}"
    return "-"


def tasks_of(results: Results | dict) -> list[str]:
    return Results.of(results).tasks()


def metric_of(results: Results, task: str) -> str:
    return next((v.accuracy[task].metric for v in results.variants.values() if task in v.accuracy), "accuracy")


def paired_vs_baseline(results: Results, run_dir: Path | None, variant: str, task: str, entry: Accuracy) -> dict | None:
    if run_dir is None or variant == results.baseline:
        return None
    try:
        return paired_between(run_dir, results.baseline, run_dir, variant, task, entry.metric,
                              higher_is_better=higher_is_better(entry.dump()))
    except (ItemMismatch, ItemFileError):   # a report still renders; `quant gate` says what is wrong
        return None


def rows_for_task(results: Results, task: str, run_dir: Path | None = None) -> list[Row]:
    base_record = results.variants.get(results.baseline)
    base = base_record.accuracy.get(task) if base_record else None
    rows = []
    for name, v in results.variants.items():
        acc = v.accuracy.get(task)
        point = headline_point(v)
        tok_s, tok_s_ci, repeats = headline_figure(v, "output_tokens_per_s")
        several = repeats > 1   # the tables show the median of the repeats
        latency = lambda stats, name: (headline_figure(v, name)[0] if several else
                                       stats.p99 if stats is not None else None)
        rows.append(Row(
            variant=name, status=v.status, backend=(acc.backend if acc and acc.backend is not None else "-"),
            accuracy=acc.value if acc else None, ci95=tuple(acc.ci95) if acc else None,
            n=acc.n if acc else 0,
            delta=(acc.value - base.value) if acc and base else None,
            out_tok_s=(tok_s if several else point.output_tokens_per_s) if point else None,
            tok_s_ci=tok_s_ci, repeats=repeats or None,
            ttft_p99_ms=latency(point.ttft_ms, "ttft_ms.p99") if point else None,
            tpot_p99_ms=latency(point.tpot_ms, "tpot_ms.p99") if point else None,
            e2e_p99_ms=latency(point.e2e_ms, "e2e_ms.p99") if point else None,
            p99_samples=p99_samples(point), foreign_cores=foreign_cores(v), failed=failed_requests(v),
            size_bytes=v.size_bytes, rss_bytes=v.memory.server_rss_bytes, gpu_bytes=v.memory.server_gpu_bytes,
            kv_bytes_per_token=kv_memory.kv_bytes_per_token(v), max_sequences=kv_memory.max_sequences(v),
            kv_measured=kv_memory.measured(v), engine_kv_tokens=v.memory.engine_kv_tokens,
            paired=paired_vs_baseline(results, run_dir, name, task, acc) if acc else None,
            kl=acc.kl.value if acc and acc.kl else None,
            goodput_rps=point.goodput_rps if point else None,
            max_rate_meeting_slo=max_rate_meeting_slo(v),
            recovery=recovery(base, acc), length_ratio=length_ratio(base, acc),
            top1=acc.kl.top1_agreement.value if acc and acc.kl and acc.kl.top1_agreement else None,
            usd_per_mtok=usd_per_million_tokens(results, name, (tok_s if several else point.output_tokens_per_s)
                                                if point else None)))
    mark_pareto(rows)
    return rows


def variant_rows(results: Results) -> list[Row]:
    """One row per variant for the columns no task changes (perf, memory, size); no paired statistics."""
    tasks = tasks_of(results)
    return rows_for_task(results, tasks[0] if tasks else "")


def _objectives(row: Row) -> tuple[float, float, float, float, float]:
    """All maximised; a missing value is the worst possible."""
    inf = float("inf")
    return (row.accuracy if row.accuracy is not None else -1.0,
            row.out_tok_s if row.out_tok_s is not None else -1.0,
            -(row.e2e_p99_ms if row.e2e_p99_ms is not None else inf),
            -(row.size_bytes if row.size_bytes is not None else inf),
            row.max_sequences if row.max_sequences is not None else -1.0)


def mark_pareto(rows: list[Row]) -> None:
    """Pareto-optimal over accuracy (up), output throughput (up), p99 end-to-end latency (down), size (down)
    and the sequences whose KV cache fits (up; the engine's figure where measured), among served rows."""
    candidates = [r for r in rows if r.accuracy is not None and r.out_tok_s is not None]
    for r in candidates:
        a = _objectives(r)
        r.pareto = not any(all(x >= y for x, y in zip(_objectives(o), a)) and _objectives(o) != a
                           for o in candidates if o is not r)
