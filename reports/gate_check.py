"""What every check of `quant gate` is (accuracy, output length, perf) and the error a gate input raises: the
pieces the gate and its check modules share, so that imports point one way (gate -> its checks -> here)."""

from __future__ import annotations

from dataclasses import dataclass, field

from reports.gate_rules import PASS, Verdict


class GateInputError(Exception):
    pass


@dataclass
class Check:
    task: str
    metric: str
    baseline: float
    candidate: float
    drop: float          # positive is worse (baseline - candidate, or the reverse when lower is better)
    margin: float
    verdict: Verdict
    comparison: dict = field(default_factory=dict)   # paired statistics, where per-item scores exist
    evidence: str = ""   # what the figures were computed from
    n_baseline: int | None = None
    n_candidate: int | None = None
    n_paired: int | None = None
    # Where a side cannot be deployed and the user gated it anyway (--allow-undeployable): a short label for
    # every line, and the same with the recorded reasons.
    caveat: str = ""
    caveat_detail: str = ""

    @property
    def partial_overlap(self) -> bool:
        return self.n_paired is not None and not (self.n_paired == self.n_baseline == self.n_candidate)

    @property
    def passed(self) -> bool:
        return self.verdict.outcome == PASS
