"""Perf against the history: a variant's headline throughput beside the earlier runs of the same checkpoint,
engine configuration and hardware (a rolling baseline: the last N, their median and spread).

The identity leaves the engine's version out on purpose: an engine upgrade is exactly what the rolling
baseline should catch, and the check names the versions it compared. A drop is a regression only beyond
`limit` plus the baseline's own spread (the largest relative distance of its runs from their median); with
fewer than 2 earlier runs the spread is unknown and the check is inconclusive, as it is where the run or the
baseline was measured under foreign load.
"""

from __future__ import annotations

import statistics
from typing import Any, Callable

from core.results import Results, VariantRecord
from reports.gate_check import Check
from reports.gate_rules import INCONCLUSIVE, PASS, REGRESSION, Verdict
from reports.headline import failed_requests, headline_figure, headline_points, perf_not_measured

DEFAULT_WINDOW = 5
DEFAULT_LIMIT = 0.05   # the drop beyond the baseline's spread that is a regression, unless the policy sets one
MIN_EARLIER = 2

# (identity, started before, window, measured) -> the earlier runs' entries (perf_entry) of other measurements than
# `measured`, each measurement once, oldest first
Lookup = Callable[[dict, str, int, Any], list[dict]]


def perf_identity(results: Results | dict, name: str) -> dict[str, Any] | None:
    """What must match for two runs' perf to be comparable; None where the variant has no headline perf."""
    results = Results.of(results)
    v = results.variants.get(name)
    points = headline_points(v) if v else []
    if not points:
        workload = None
    else:
        workload = next(w for w in v.perf.values() if any(p is points[0] for p in w.points))
    if workload is None:
        return None
    engine = results.engine
    recipe_engine = results.recipe.get("engine") or {}
    own = next((x.get("engine_args") for x in results.recipe.get("variants", []) if x.get("name") == name), None)
    loads = [p.host_load.cpus for p in points if p.host_load is not None]
    return {"checkpoint": v.checkpoint_key or v.checkpoint,
            "engine": {"kind": engine.kind if engine else recipe_engine.get("kind"),
                       "device": engine.device if engine else None, "dtype": engine.dtype if engine else None,
                       "args": recipe_engine.get("args") or {}, "env": recipe_engine.get("env") or {},
                       "variant_args": own or {}},
            "hardware": {"node": v.ran_on.node if v.ran_on else None, "gpus": v.ran_on.gpus if v.ran_on else [],
                         "cpus": loads[0] if loads else None},
            "workload": {"name": workload.workload, "prompt_tokens": workload.prompt_tokens,
                         "output_tokens": workload.output_tokens, "concurrency": points[0].concurrency}}


def perf_entry(results: Results | dict, name: str) -> dict[str, Any] | None:
    """One run's figures for the history: {identity, started, version, tok_s, foreign, failed}; None where the
    headline level measured nothing (every request failed)."""
    results = Results.of(results)
    identity = perf_identity(results, name)
    if identity is None:
        return None
    v: VariantRecord = results.variants[name]
    tok_s, _, _ = headline_figure(v, "output_tokens_per_s")
    failed = failed_requests(v)
    if tok_s is None or perf_not_measured(failed):
        return None
    points = headline_points(v)
    return {"identity": identity, "started": results.started, "tok_s": tok_s,
            "version": results.engine.version if results.engine else None,
            "foreign": any(p.foreign_load for p in points), "measured": measured(points),
            "failed": list(failed) if failed and failed[0] else None}


def measured(points) -> list[str] | None:
    """When the headline levels were run: a run that reused them from the stage cache (an unchanged re-run) has
    the same, and is the same evidence; None for points that do not say."""
    started = [p.started for p in points]
    return sorted(started) if all(started) else None


def history_check(name: str, current: dict, earlier: list[dict], window: int, limit: float) -> Check:
    """The current run's headline tok/s against the median of the last `window` earlier runs."""
    recent = earlier[-window:]
    now = current["tok_s"]
    nan = float("nan")
    row = lambda base, drop, verdict, evidence: Check("perf-history", "output_tok_s", base, now, drop, limit,
                                                      verdict, evidence=evidence)
    if len(recent) < MIN_EARLIER:
        return row(nan, nan, Verdict(INCONCLUSIVE, f"{len(recent)} earlier run(s) of {name} with the same checkpoint, "
                                     f"engine configuration and hardware in the history: a rolling baseline needs "
                                     f"{MIN_EARLIER}"), "history")
    values = [e["tok_s"] for e in recent]
    median = statistics.median(values)
    spread = max(abs(v / median - 1) for v in values)
    drop = 1 - now / median
    versions = sorted({str(e["version"]) for e in recent if e["version"]})
    evidence = (f"last {len(recent)} runs: median {median:.0f} tok/s, spread ±{spread:.1%}"
                + (f" (engine {', '.join(versions)})" if versions else "")
                + (f"; this run: engine {current['version']}" if current.get("version") else ""))
    where = f"drop {drop:+.1%} vs the rolling baseline ({evidence}); limit {limit:.1%} beyond its spread"
    outcome = REGRESSION if drop > limit + spread else PASS
    loaded = [e["started"] for e in recent if e["foreign"]] + (["this run"] if current["foreign"] else [])
    if loaded:
        return row(median, drop, Verdict(INCONCLUSIVE, f"measured under foreign load ({', '.join(loaded)}): "
                                         f"would be {outcome.upper()}: {where}"), "history")
    return row(median, drop, Verdict(outcome, where), "history")


def history_checks(results: Results | dict, names: list[str], lookup: Lookup, window: int,
                   limit: float | None) -> dict[str, Check]:
    """Per variant with headline perf: its check against the history's earlier runs of the same identity."""
    out = {}
    for name in names:
        current = perf_entry(results, name)
        if current is None:
            continue
        earlier = lookup(current["identity"], current["started"], window, current["measured"])
        out[name] = history_check(name, current, earlier, window, DEFAULT_LIMIT if limit is None else limit)
    return out
