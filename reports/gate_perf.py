"""Perf checks of `quant gate`, honest about noise.

Throughput: with the headline level repeated on both sides (the workload's `repeats`, or a level listed
several times), a Welch t interval on log(tok/s) gives the ratio's interval and decides like
non-inferiority. With one run per side, a drop within `throughput_noise` of the limit is inconclusive.
Latency SLOs on a p99: inconclusive when the p99 rests on fewer than 100 samples (it is then the maximum,
interpolated, not a 99th percentile) or was not measured.
Every perf check is inconclusive when a headline level of either side was measured under foreign load (other
processes took CPU meanwhile: perf/host_load.py), unless the policy allows it (`perf.allow_foreign_load`,
`quant gate --allow-foreign-load`); then the check decides and says what it was measured under.
Every perf check is inconclusive, too, where more than `perf.max_failed_requests` (1%) of the requests of either
side's headline level failed: its figures stand on the requests that happened to succeed (where all failed,
there are none).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import stdtrit

from core.recipe import Gates
from core.results import PerfPoint, VariantRecord
from perf.metrics import reliable, samples_needed
from reports.gate_check import Check, GateInputError
from reports.gate_rules import INCONCLUSIVE, PASS, REGRESSION, Verdict
from reports.headline import failed_requests, headline_points


def _ratio_interval(base: list[float], cand: list[float], confidence: float) -> tuple[float, float, float]:
    """Welch t interval for cand/base from repeated runs (on the log scale): (ratio, low, high)."""
    lb, lc = np.log(base), np.log(cand)
    vb, vc = lb.var(ddof=1) / lb.size, lc.var(ddof=1) / lc.size
    diff = float(lc.mean() - lb.mean())
    se = math.sqrt(vb + vc)
    if se == 0:
        return (math.exp(diff),) * 3
    df = (vb + vc) ** 2 / (vb ** 2 / (lb.size - 1) + vc ** 2 / (lc.size - 1))
    half = float(stdtrit(df, 0.5 + confidence / 2)) * se
    return math.exp(diff), math.exp(diff - half), math.exp(diff + half)


def _headline(side: dict) -> list[PerfPoint]:
    """A gate side's variant (a dict carrying where it came from) -> its headline perf points."""
    return headline_points(VariantRecord.model_validate(side))


def _stats(point: PerfPoint, metric: str) -> dict:
    """A latency's statistics as perf.metrics reads them (only what was measured)."""
    stats = getattr(point, metric)
    return stats.dump() if stats is not None else {}


def throughput_check(baseline: dict, candidate: dict, policy: Gates) -> Check:
    rules, limit = policy.perf, policy.perf.max_throughput_drop
    base_runs = [p.output_tokens_per_s for p in _headline(baseline)]
    cand_runs = [p.output_tokens_per_s for p in _headline(candidate)]
    if not base_runs:
        raise GateInputError(f"{baseline['_path']}: baseline {baseline['name']} has no perf results")
    if None in base_runs + cand_runs:
        return Check("perf", "output_tok_s", math.nan, math.nan, math.nan, limit,
                     Verdict(INCONCLUSIVE, "a run measured no output tokens/s (every request failed)"),
                     evidence="headline level")
    if min(base_runs + cand_runs) <= 0:
        return Check("perf", "output_tok_s", base_runs[0], cand_runs[0], math.nan, limit,
                     Verdict(INCONCLUSIVE, "a run measured no output tokens/s"), evidence="headline level")
    base_mean, cand_mean = float(np.mean(base_runs)), float(np.mean(cand_runs))
    if len(base_runs) > 1 and len(cand_runs) > 1:
        ratio, low, high = _ratio_interval(base_runs, cand_runs, policy.confidence)
        drop, drop_low, drop_high = 1 - ratio, 1 - high, 1 - low
        ci = f"drop {drop:+.1%}, {policy.confidence:.0%} CI {drop_low:+.1%}..{drop_high:+.1%} (Welch t on log tok/s)"
        outcome = PASS if drop_high <= limit else REGRESSION if drop_low > limit else INCONCLUSIVE
        evidence = f"{len(base_runs)} vs {len(cand_runs)} repeated runs"
        reason = f"{ci} vs limit {limit:.1%}"
    else:
        drop, noise = 1 - cand_mean / base_mean, rules.throughput_noise
        outcome = PASS if drop <= limit - noise else REGRESSION if drop > limit + noise else INCONCLUSIVE
        evidence = "one run per side"
        reason = f"drop {drop:+.1%} vs limit {limit:.1%} (single runs, noise band +-{noise:.0%})"
        if outcome == INCONCLUSIVE:
            reason += "; repeat the headline level (the workload's repeats: 3) to decide"
    return Check("perf", "output_tok_s", base_mean, cand_mean, drop, limit, Verdict(outcome, reason),
                 evidence=evidence)


def slo_check(baseline: dict, candidate: dict, metric: str, slo: float) -> Check:
    base_point, cand_point = (_headline(baseline) or [PerfPoint()])[0], _headline(candidate)[0]
    stats = _stats(cand_point, metric)
    value = stats.get("p99")
    requests = cand_point.n - (cand_point.errors or 0) if cand_point.n is not None else None
    base_value = _stats(base_point, metric).get("p99")
    name = f"{metric[:-3]}_p99_ms"
    nan = float("nan")
    row = lambda verdict, evidence: Check("perf", name, base_value if base_value is not None else nan,
                                          value if value is not None else nan, nan, slo, verdict,
                                          evidence=evidence)
    if value is None or not math.isfinite(value):
        return row(Verdict(INCONCLUSIVE, f"p99 not measured (SLO {slo:g} ms)"), "headline level")
    samples = stats.get("n", requests)
    evidence = f"p99 of {samples if samples is not None else 'an unknown number of'} samples"
    if not reliable(stats, "p99", requests):
        return row(Verdict(INCONCLUSIVE, f"p99 {value:.1f} ms from {samples or 'too few'} samples: a p99 needs "
                           f">= {samples_needed('p99')} (raise requests_per_level)"), evidence)
    ok = value <= slo
    return row(Verdict(PASS if ok else REGRESSION, f"p99 {value:.1f} ms {'<=' if ok else '>'} SLO {slo:g} ms"),
               evidence)


def foreign_load_note(baseline: dict, candidate: dict) -> str | None:
    """Which side's headline levels were measured under foreign load, with the most other processes took."""
    sides = []
    for side in (baseline, candidate):
        loads = [p.host_load for p in _headline(side) if p.foreign_load]
        if loads:
            worst = max(load.foreign_cores for load in loads)
            on_gpu = max(len(load.gpu_foreign_processes or []) for load in loads)
            what = (f"up to {on_gpu} other process(es) on its GPUs" if on_gpu else
                    f"up to {worst:.2f} cores of other processes' CPU")
            sides.append(f"{side['name']} ({len(loads)} of {len(_headline(side))} headline runs, {what})")
    return "measured under foreign load: " + "; ".join(sides) if sides else None


def _under_foreign_load(check: Check, note: str, allowed: bool) -> Check:
    if allowed:
        check.verdict = Verdict(check.verdict.outcome, f"{check.verdict.reason}; {note} (allowed)")
    else:
        check.verdict = Verdict(INCONCLUSIVE, f"{note}: re-measure on a quiet machine, or --allow-foreign-load "
                                              f"(would be {check.verdict.outcome.upper()}: {check.verdict.reason})")
    return check


def perf_checks(baseline: dict, candidate: dict, policy: Gates) -> list[Check]:
    rules = policy.perf
    if rules.max_throughput_drop is None and rules.ttft_p99_ms is None and rules.tpot_p99_ms is None:
        return []
    if not _headline(candidate):
        raise GateInputError(f"{candidate['_path']}: perf gates set but candidate {candidate['name']} has no perf "
                             f"results (status {candidate.get('status')}: {candidate.get('reason')})")
    checks = [throughput_check(baseline, candidate, policy)] if rules.max_throughput_drop is not None else []
    for metric, slo in (("ttft_ms", rules.ttft_p99_ms), ("tpot_ms", rules.tpot_p99_ms)):
        if slo is not None:
            checks.append(slo_check(baseline, candidate, metric, slo))
    note = foreign_load_note(baseline, candidate)
    checks = [_under_foreign_load(c, note, rules.allow_foreign_load) for c in checks] if note else checks
    counts = failed_counts(baseline, candidate)
    for check in checks:
        check.evidence += f"; {counts}" if counts else ""
    failures = failed_requests_note(baseline, candidate, rules.max_failed_requests)
    return [_with_failed_requests(c, failures) for c in checks] if failures else checks


def failed_counts(baseline: dict, candidate: dict) -> str:
    """"requests failed: cand 2 of 8" for the sides whose headline level had any fail; "" where none did."""
    sides = [f"{side['name']} {failed[0]:,} of {failed[1]:,}" for side in (baseline, candidate)
             if (failed := failed_requests(VariantRecord.model_validate(side))) and failed[0]]
    return f"requests failed: {', '.join(sides)}" if sides else ""


def failed_requests_note(baseline: dict, candidate: dict, limit: float) -> str | None:
    """Which side's headline level had more than `limit` of its requests fail, and how many."""
    sides = []
    for side in (baseline, candidate):
        failed = failed_requests(VariantRecord.model_validate(side))
        if failed and failed[1] and failed[0] / failed[1] > limit:
            sides.append(f"{side['name']} {failed[0]:,} of {failed[1]:,}")
    return (f"requests failed at the headline level: {'; '.join(sides)} (more than {limit:.0%}): re-measure"
            if sides else None)


def _with_failed_requests(check: Check, note: str) -> Check:
    check.verdict = Verdict(INCONCLUSIVE, f"{note} (would be {check.verdict.outcome.upper()}: {check.verdict.reason})")
    return check
