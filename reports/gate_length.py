"""The output-length check of `quant gate` (policy `min_length_ratio`, like MLPerf's 90%): per task whose answers
are generated, the candidate's mean tokens per answer over the baseline's must reach the ratio. A model that
answers shorter can keep its score on short items and still be worse to deploy."""

from __future__ import annotations

from core.recipe import Gates
from reports.gate_check import Check, GateInputError
from reports.gate_rules import PASS, REGRESSION, Verdict


def _tokens(side: dict, task: str) -> dict | None:
    return (side.get("accuracy", {}).get(task) or {}).get("response_tokens")


def length_checks(baseline: dict, candidate: dict, policy: Gates) -> list[Check]:
    limit = policy.min_length_ratio
    if limit is None:
        return []
    tasks = [t for t in baseline.get("accuracy", {}) if _tokens(baseline, t)]
    if not tasks:
        raise GateInputError(f"{baseline['_path']}: min_length_ratio set but baseline {baseline['name']} records no "
                             f"output lengths (accuracy.<task>.response_tokens, counted by `quant sweep` on tasks "
                             f"that generate answers)")
    checks = []
    for task in tasks:
        base, cand = _tokens(baseline, task), _tokens(candidate, task)
        if not cand:
            raise GateInputError(f"{candidate['_path']}: {task}: candidate {candidate['name']} records no output "
                                 f"lengths, the baseline does: min_length_ratio cannot be checked")
        ratio = cand["value"] / base["value"] if base["value"] else float("inf")
        ok = ratio >= limit
        reason = (f"answers {ratio:.1%} of the baseline's length ({cand['value']:.1f} vs {base['value']:.1f} "
                  f"tokens) {'>=' if ok else '<'} {limit:.0%}")
        checks.append(Check(task, "output_length", base["value"], cand["value"], 1 - ratio, 1 - limit,
                            Verdict(PASS if ok else REGRESSION, reason),
                            evidence=f"mean tokens of {base['n']} / {cand['n']} generated answers",
                            n_baseline=base["n"], n_candidate=cand["n"]))
    return checks
