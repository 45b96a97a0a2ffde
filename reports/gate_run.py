"""One `quant gate` invocation: a baseline against one candidate variant, or against every variant of a run
(`--candidate RUN` without `:VARIANT`), decided as one family of checks (reports/family.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from reports.family import Family, correct, family_confidence
from reports.gate import (Check, GateInputError, check_policy_tasks, compare, load_policy, load_side, outcome,
                          pick_variant, undeployable)
from reports.gate_hardware import hardware_note
from reports.gate_rules import INCONCLUSIVE, PASS, REGRESSION
from reports.perf_history import Lookup, history_checks


@dataclass
class GateRun:
    baseline: str
    rule: str
    policy_source: str
    gated: dict[str, list[Check]]    # candidate variant -> its checks
    not_gated: dict[str, str]        # candidate variant -> why it was not gated (it cannot be deployed)
    family: Family
    notes: list[str] = field(default_factory=list)   # what the reader must know beside the checks (hardware)

    @property
    def outcome(self) -> str:
        outcomes = {outcome(checks) for checks in self.gated.values()}
        return next(o for o in (REGRESSION, INCONCLUSIVE, PASS) if o in outcomes)

    @property
    def every_variant(self) -> bool:
        return len(self.gated) > 1 or bool(self.not_gated)


def _candidates(results: dict, variant: str | None, baseline: dict, allow_undeployable: bool
                ) -> tuple[list[dict], dict[str, str]]:
    """The named variant; or, for a run of several variants named without one, every variant but the
    baseline, less those that cannot be deployed (listed with the reason, unless allow_undeployable)."""
    names = list(results["variants"])
    if variant is not None or len(names) == 1:
        return [pick_variant(results, variant, default_baseline=False, label="--candidate")], {}
    same_run = results.get("_path") == baseline.get("_path")
    names = [n for n in names if n != results["baseline"] and not (same_run and n == baseline["name"])]
    sides = [pick_variant(results, n, default_baseline=False, label="--candidate") for n in names]
    skipped = {} if allow_undeployable else {s["name"]: why[1] for s in sides if (why := undeployable(s, "candidate"))}
    sides = [s for s in sides if s["name"] not in skipped]
    if not sides:
        raise GateInputError(f"{results['_path']}: no variant besides the baseline to gate"
                             + (f" that can be deployed ({'; '.join(skipped.values())})" if skipped else ""))
    return sides, skipped


def run_gate(baseline_spec: str, candidate_spec: str, policy_path: str | None = None, rule: str | None = None,
             allow_partial_overlap: bool = False, allow_undeployable: bool = False,
             allow_foreign_load: bool = False, perf_history: tuple[Lookup, int] | None = None) -> GateRun:
    """Every check of the candidate(s) against the baseline, the family's correction applied. GateInputError
    for anything that is not a measured verdict. perf_history: (the history's lookup, N): each candidate's
    perf against the last N earlier runs of the same checkpoint, engine configuration and hardware too."""
    base_results, base_variant = load_side(baseline_spec)
    cand_results, cand_variant = load_side(candidate_spec)
    baseline = pick_variant(base_results, base_variant, default_baseline=True, label="--baseline")
    candidates, not_gated = _candidates(cand_results, cand_variant, baseline, allow_undeployable)
    policy, source = load_policy(Path(policy_path) if policy_path else None, base_results)
    tasks = list(baseline.get("accuracy", {}))
    check_policy_tasks(policy, tasks, source)
    if rule:
        policy = policy.model_copy(update={"rule": rule})
    perf_gated = any(v is not None for v in (policy.perf.max_throughput_drop, policy.perf.ttft_p99_ms,
                                             policy.perf.tpot_p99_ms))
    note = hardware_note(base_results, cand_results, perf_gated, baseline, candidates)
    if allow_foreign_load:
        policy = policy.model_copy(update={"perf": policy.perf.model_copy(update={"allow_foreign_load": True})})
    family = Family(tasks, [c["name"] for c in candidates], policy.rule, round(1 - policy.confidence, 10),
                    policy.correction)
    confidence = family_confidence(policy.rule, policy.confidence, family.size, policy.correction)
    gated = {c["name"]: compare(baseline, c, policy, allow_partial_overlap, source, allow_undeployable, confidence)
             for c in candidates}
    correct([check for checks in gated.values() for check in checks if check.task in tasks and
             check.comparison], family)
    if perf_history:
        lookup, window = perf_history
        found = history_checks(cand_results, list(gated), lookup, window, policy.perf.max_throughput_drop)
        for name, check in found.items():
            gated[name].append(check)
    return GateRun(baseline["name"], policy.rule, source, gated, not_gated, family, [note] if note else [])
