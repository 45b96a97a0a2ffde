"""A variant's headline perf: the level its tables, choose, the gate and the history show (the highest
concurrency of its first closed-loop workload), its runs and its figures over them. Light on imports: an
unchanged re-run reads it without numpy or scipy."""

from __future__ import annotations

from core.results import PerfPoint, VariantRecord


def headline_point(variant: VariantRecord) -> PerfPoint | None:
    """The perf point a table shows: the highest concurrency of the first closed-loop workload."""
    points = headline_points(variant)
    return points[0] if points else None


def headline_summary(variant: VariantRecord) -> dict | None:
    """The headline level's figures over its repeats ({repeats, method, figures: {name: {median, ci95}}}):
    as the sweep stored them, else from its points (runs made before levels were summarised)."""
    points = headline_points(variant)
    if not points:
        return None
    workload = next(w for w in variant.perf.values() if any(p is points[0] for p in w.points))
    for level in workload.levels:
        if level.concurrency == points[0].concurrency and level.repeats == len(points):
            return level.dump()
    from perf.repeats import summarise_level   # numpy and scipy: only for runs stored without their levels

    return summarise_level([p.dump() for p in points])


def headline_figure(variant: VariantRecord, name: str) -> tuple[float | None, tuple | None, int]:
    """(median, 95% interval or None, repeats) of one headline figure, e.g. output_tokens_per_s, ttft_ms.p99."""
    summary = headline_summary(variant)
    if not summary:
        return None, None, 0
    figure = summary["figures"].get(name)
    if figure is None:
        return None, None, summary["repeats"]
    ci = figure.get("ci95")
    return figure["median"], tuple(ci) if ci and None not in ci else None, summary["repeats"]


def headline_points(variant: VariantRecord) -> list[PerfPoint]:
    """Every run of the headline level (a workload may list a level several times to repeat it)."""
    for workload in variant.perf.values():
        points = [p for p in workload.points if p.concurrency is not None]
        if points:
            top = max(p.concurrency for p in points)
            return [p for p in points if p.concurrency == top]
    return []


def foreign_cores(variant: VariantRecord) -> float | None:
    """The most CPU other processes took during a headline run flagged as measured under foreign load."""
    flagged = [p.host_load.foreign_cores for p in headline_points(variant) if p.foreign_load]
    return max(flagged) if flagged else None


def failed_requests(variant: VariantRecord) -> tuple[int, int] | None:
    """(failed, sent) requests over the headline level's runs; None where it has none, or no counts."""
    points = [p for p in headline_points(variant) if p.n is not None]
    if not points:
        return None
    return int(sum(p.errors or 0 for p in points)), int(sum(p.n for p in points))


def failed_note(failed: tuple[int, int] | None) -> str:
    """" (2 of 8 requests failed)" beside a perf figure; "" where none did."""
    if not failed or not failed[0]:
        return ""
    return f" ({failed[0]:,} of {failed[1]:,} requests failed)"


def perf_not_measured(failed: tuple[int, int] | None) -> bool:
    """Every request of the headline level failed: there is no perf figure, only that."""
    return bool(failed and failed[1] and failed[0] == failed[1])
