"""The gate's verdict on an exported variant, as its model card states it: `quant gate` of the variant against
its run's baseline under a policy (the run's recipe gates unless one is given), or why it could not decide."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.recipe import Gates
from reports.gate import GateInputError, load_policy, load_side
from reports.gate_run import GateRun, run_gate


@dataclass
class CardVerdict:
    outcome: str | None          # pass, regression, inconclusive; None where the gate could not decide
    policy: Gates | None         # the policy it was decided under
    policy_source: str           # where that policy came from, as `quant gate` says it
    run: GateRun | None = None
    why_not: str = ""            # where outcome is None: the gate's own error line


def gate_command(run_dir: Path, baseline: str, variant: str, policy_path: str | None,
                 allow_undeployable: bool) -> str:
    """The `quant gate` invocation that reproduces the card's verdict."""
    return " ".join(["quant gate", f"--baseline {run_dir}:{baseline}", f"--candidate {run_dir}:{variant}",
                     *([f"--policy {policy_path}"] if policy_path else []),
                     *(["--allow-undeployable"] if allow_undeployable else [])])


def card_verdict(run_dir: Path, baseline: str, variant: str, policy_path: str | None = None,
                 allow_undeployable: bool = False) -> CardVerdict:
    """The gate's verdict on `variant` against `baseline` of the run in run_dir."""
    try:
        base_results, _ = load_side(str(run_dir))
        policy, source = load_policy(Path(policy_path) if policy_path else None, base_results)
    except GateInputError as exc:
        return CardVerdict(None, None, "", why_not=str(exc))
    try:
        run = run_gate(f"{run_dir}:{baseline}", f"{run_dir}:{variant}", policy_path,
                       allow_undeployable=allow_undeployable)
    except GateInputError as exc:
        return CardVerdict(None, policy, source, why_not=str(exc))
    return CardVerdict(run.outcome, policy, source, run)
