"""`quant gate`: does a candidate lose more than allowed against a baseline, and does the data say so?"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from quant.recipe import Gates
from quant.store import read_json
from reports.gate_rules import INCONCLUSIVE, PASS, REGRESSION, Verdict, decide, z_for
from reports.samples import ItemMismatch, paired_between
from reports.table import headline_point

EXIT = {PASS: 0, REGRESSION: 1, "error": 2, INCONCLUSIVE: 3}


class GateInputError(Exception):
    pass


@dataclass
class Check:
    task: str
    metric: str
    baseline: float
    candidate: float
    margin: float
    verdict: Verdict
    comparison: dict = field(default_factory=dict)   # paired statistics, where per-item scores exist

    @property
    def drop(self) -> float:
        return self.baseline - self.candidate

    @property
    def passed(self) -> bool:
        return self.verdict.outcome == PASS


def load_side(spec: str) -> tuple[dict, str | None]:
    """'DIR', 'DIR/results.json' or either with ':VARIANT' -> (results, variant or None)."""
    path, variant = Path(spec), None
    if not path.exists() and ":" in spec:
        head, variant = spec.rsplit(":", 1)
        path = Path(head)
    if path.is_dir():
        path = path / "results.json"
    if not path.is_file():
        raise GateInputError(f"{spec}: no results.json there")
    try:
        results = read_json(path)
    except ValueError as exc:
        raise GateInputError(f"{path}: not valid JSON ({exc})") from None
    results["_run_dir"] = str(path.parent)
    return results, variant


def pick_variant(results: dict, variant: str | None, default_baseline: bool, label: str) -> dict:
    names = list(results["variants"])
    if variant is None:
        if default_baseline:
            variant = results["baseline"]
        elif len(names) == 1:
            variant = names[0]
        else:
            raise GateInputError(f"{label}: the run has several variants; name one as PATH:VARIANT "
                                 f"(one of {', '.join(names)})")
    if variant not in results["variants"]:
        raise GateInputError(f"{label}: no variant {variant!r} (have {', '.join(names)})")
    return results["variants"][variant] | {"name": variant, "_run_dir": results.get("_run_dir")}


def load_policy(path: Path | None, candidate_results: dict) -> Gates:
    if path is None:
        return Gates.model_validate(candidate_results.get("recipe", {}).get("gates", {}))
    try:
        return Gates.model_validate(yaml.safe_load(Path(path).read_text()) or {})
    except (OSError, yaml.YAMLError, ValueError) as exc:
        raise GateInputError(f"policy {path}: {str(exc).splitlines()[0]}") from None


def paired(baseline: dict, candidate: dict, task: str, metric: str, confidence: float) -> dict | None:
    try:
        return paired_between(baseline.get("_run_dir"), baseline["name"], candidate.get("_run_dir"),
                              candidate["name"], task, metric, z=z_for(confidence))
    except ItemMismatch as exc:
        raise GateInputError(str(exc)) from None


def accuracy_check(task: str, base: dict, cand: dict, baseline: dict, candidate: dict, policy: Gates) -> Check:
    margin = policy.margin_for(task, base["value"])
    drop = base["value"] - cand["value"]
    stats = paired(baseline, candidate, task, base["metric"], policy.confidence)
    if stats is None:
        if policy.rule != "point":
            raise GateInputError(f"{task}: rule {policy.rule!r} needs per-item scores "
                                 f"(variants/<name>/evals/{task}.jsonl next to results.json)")
        low = high = drop
        n = min(base["n"], cand["n"])
    else:
        low, high = 0.0 - stats["ci95"][1], 0.0 - stats["ci95"][0]
        n = stats["n"]
    verdict = decide(policy.rule, drop, low, high, n, margin, policy.min_n, policy.confidence)
    return Check(task, base["metric"], base["value"], cand["value"], margin, verdict, stats or {})


def perf_checks(baseline: dict, candidate: dict, policy: Gates) -> list[Check]:
    rules = policy.perf
    if not any(v is not None for v in rules.model_dump().values()):
        return []
    base_point, cand_point = headline_point(baseline), headline_point(candidate)
    if cand_point is None:
        raise GateInputError(f"perf gates set but candidate {candidate['name']} has no perf results "
                             f"(status {candidate.get('status')}: {candidate.get('reason')})")
    checks = []
    if rules.max_throughput_drop is not None:
        if base_point is None:
            raise GateInputError(f"baseline {baseline['name']} has no perf results")
        base_tps, cand_tps = base_point["output_tokens_per_s"], cand_point["output_tokens_per_s"]
        allowed = base_tps * (1 - rules.max_throughput_drop)
        ok = cand_tps >= allowed
        reason = f"{cand_tps:.0f} tok/s {'>=' if ok else '<'} {allowed:.0f} allowed"
        checks.append(Check("perf", "output_tok_s", base_tps, cand_tps, base_tps - allowed,
                            Verdict(PASS if ok else REGRESSION, reason)))
    for metric, slo in (("ttft_ms", rules.ttft_p99_ms), ("tpot_ms", rules.tpot_p99_ms)):
        if slo is None:
            continue
        value = (cand_point.get(metric) or {}).get("p99")
        base_value = (base_point or {}).get(metric, {}).get("p99", float("nan"))
        ok = value is not None and value <= slo
        checks.append(Check("perf", f"{metric[:-3]}_p99_ms", base_value, value if value is not None else float("nan"),
                            slo, Verdict(PASS if ok else REGRESSION, f"p99 {value} ms vs SLO {slo} ms")))
    return checks


def compare(baseline: dict, candidate: dict, policy: Gates) -> list[Check]:
    checks = []
    for task, base in baseline.get("accuracy", {}).items():
        cand = candidate.get("accuracy", {}).get(task)
        if cand is None:
            raise GateInputError(f"candidate {candidate['name']} has no result for task {task} "
                                 f"(status {candidate.get('status')}: {candidate.get('reason')})")
        checks.append(accuracy_check(task, base, cand, baseline, candidate, policy))
    if not checks:
        raise GateInputError(f"baseline {baseline['name']} has no accuracy results")
    return checks + perf_checks(baseline, candidate, policy)


def outcome(checks: list[Check]) -> str:
    outcomes = {c.verdict.outcome for c in checks}
    return REGRESSION if REGRESSION in outcomes else INCONCLUSIVE if INCONCLUSIVE in outcomes else PASS
