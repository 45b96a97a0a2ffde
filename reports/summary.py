"""The verdict first: what a report opens with. Per variant, the outcome `quant gate` gives it against the
run's baseline under the recipe's own policy, and the check that decided it; per task, the variant
`quant choose` picks with its defaults and the command that serves it. Computed by the gate and choose
themselves, never re-derived here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from core.results import Results
from core.run_layout import RunLayout
from reports.choose import ChooseError, choose, deploy_command, export_command, recipe_max_drop
from reports.gate import (GateInputError, check_policy_tasks, compare, load_policy, outcome, pick_variant,
                          undeployable)
from reports.gate_rules import PASS, REGRESSION

BASELINE, UNDEPLOYABLE, CANNOT_GATE = "baseline", "cannot be deployed", "cannot gate"


@dataclass
class GateLine:
    variant: str
    outcome: str    # pass, regression, inconclusive, cannot be deployed, cannot gate, baseline
    deciding: str   # the check that decided it (task, metric, reason), or why there is no verdict


@dataclass
class TaskPick:
    task: str
    variant: str | None
    why: str
    command: str | None = None
    export: str | None = None    # the `quant export` that makes its folder with a model card


@dataclass
class Summary:
    policy: str     # the rule and where the policy came from
    gates: list[GateLine]
    picks: list[TaskPick]


def _gate_document(results: Results, run_dir: Path | None) -> dict:
    """The run as `quant gate` reads a side (reports.gate.load_side)."""
    path = RunLayout(Path(run_dir)).results if run_dir else Path("results.json")
    return results.dump() | {"_run_dir": str(run_dir) if run_dir else None, "_path": str(path)}


def _deciding(checks) -> str:
    """The first check whose verdict is the overall one (for a pass: every check passed)."""
    overall = outcome(checks)
    if overall == PASS:
        return f"all {len(checks)} checks pass"
    c = next(c for c in checks if c.verdict.outcome == overall)
    return f"{c.task} {c.metric}: {c.verdict.reason}"


def gate_lines(results: Results, run_dir: Path | None) -> tuple[str, list[GateLine]]:
    document = _gate_document(results, run_dir)
    baseline_name = results.baseline
    lines = [GateLine(baseline_name, BASELINE, "the reference every other variant is gated against")]
    try:
        policy, source = load_policy(None, document)
        baseline = pick_variant(document, None, default_baseline=True, label="baseline")
        check_policy_tasks(policy, list(baseline.get("accuracy", {})), source)
    except GateInputError as exc:
        return "-", lines + [GateLine(n, CANNOT_GATE, str(exc)) for n in results.variants if n != baseline_name]
    for name in results.variants:
        if name == baseline_name:
            continue
        candidate = pick_variant(document, name, default_baseline=False, label="candidate")
        if why := undeployable(candidate, "candidate"):
            lines.append(GateLine(name, UNDEPLOYABLE, why[1]))
            continue
        try:
            checks = compare(baseline, candidate, policy, policy_source=source)
        except GateInputError as exc:
            lines.append(GateLine(name, CANNOT_GATE, str(exc)))
            continue
        lines.append(GateLine(name, outcome(checks), _deciding(checks)))
    return f"rule {policy.rule}, {source}", lines


def blocked_variants(lines: list[GateLine]) -> dict[str, str]:
    """Variant -> why the recipe's gate blocks it: a regression on some check, or it cannot be deployed."""
    return {line.variant: f"{line.outcome}: {line.deciding}" for line in lines
            if line.outcome in (REGRESSION, UNDEPLOYABLE)}


def task_picks(results: Results, run_dir: Path | None = None, gates: list[GateLine] | None = None) -> list[TaskPick]:
    tasks = results.tasks()
    if not tasks or results.usable():
        return []
    try:
        max_drop = recipe_max_drop(results, tasks)
        blocked = blocked_variants(gates if gates is not None else gate_lines(results, run_dir)[1])
        choices, _ = choose(results, tasks, max_drop, blocked=blocked)
    except (ChooseError, ValidationError) as exc:
        return [TaskPick(t, None, str(exc).splitlines()[0]) for t in tasks]
    picks = []
    for task, c in choices.items():
        if c is None:
            picks.append(TaskPick(task, None, f"no served variant within drop {max_drop[task]:.3f}"))
        else:
            why = (f"within drop {max_drop[task]:.3f} (accuracy {c.accuracy:.3f}, drop {c.drop:+.3f}): {c.why}"
                   + (f"; blocked by the gate ({c.blocked})" if c.blocked else ""))
            picks.append(TaskPick(task, c.variant, why, deploy_command(results, c.variant),
                                  export_command(run_dir, c.variant)))
    return picks


def summarize(results: Results, run_dir: Path | None) -> Summary:
    if results.usable():
        return Summary("-", [], [])
    policy, gates = gate_lines(results, run_dir)
    return Summary(policy, gates, task_picks(results, run_dir, gates))
