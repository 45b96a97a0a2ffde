"""Several checks decided together: the family-wise error of the regression calls a gate makes.

A gate fails when any check of any candidate regresses, so with k tasks (times v variants) each at level
alpha the chance of at least one false alarm grows to about 1 - (1 - alpha)^(k*v). The family is every
accuracy check of the gate (tasks x candidate variants) under one statistical rule:
- significant: Holm's step-down on the paired tests' p-values; a regression needs its Holm-adjusted p below
  alpha = 1 - confidence, else it is inconclusive.
- non-inferiority: a regression (the lower bound beyond the margin) is called on the interval at confidence
  1 - alpha / m (Bonferroni; the margin-shifted test has no p-value to step down on). A pass needs every
  task within its margin, which keeps the chance of a false pass at alpha without a correction.
- point has no test, so there is no error to control; the family is named all the same.
"""

from __future__ import annotations

from dataclasses import dataclass

from reports.gate_rules import INCONCLUSIVE, REGRESSION, Verdict, item_spread, items_to_resolve

METHODS = {"significant": "Holm", "non-inferiority": "Bonferroni"}


@dataclass
class Family:
    tasks: list[str]
    variants: list[str]
    rule: str
    alpha: float
    correction: str   # "holm" (the policy's default) or "none"

    @property
    def size(self) -> int:
        return len(self.tasks) * len(self.variants)

    @property
    def method(self) -> str | None:
        """The correction applied, or None where none is (rule point, one check, or `correction: none`)."""
        if self.correction == "none" or self.size < 2:
            return None
        return METHODS.get(self.rule)

    def describe(self) -> str:
        what = (f"{len(self.tasks)} task{'s' * (len(self.tasks) != 1)} x {len(self.variants)} "
                f"variant{'s' * (len(self.variants) != 1)} = {self.size} accuracy check{'s' * (self.size != 1)}")
        if self.rule == "point":
            how = "rule point has no test: no family-wise correction"
        elif self.size < 2:
            how = f"alpha {self.alpha:g}, one check: nothing to correct"
        elif self.method is None:
            how = f"alpha {self.alpha:g} per check, uncorrected (correction: none)"
        else:
            how = f"family-wise alpha {self.alpha:g}, {self.method}"
        return f"family: {what}; {how}"

    def as_dict(self) -> dict:
        return {"tasks": self.tasks, "variants": self.variants, "size": self.size, "rule": self.rule,
                "alpha": self.alpha, "method": self.method}


def family_confidence(rule: str, confidence: float, size: int, correction: str) -> float | None:
    """The confidence of the interval a non-inferiority regression is called on, where it differs."""
    if rule != "non-inferiority" or correction == "none" or size < 2:
        return None
    return 1 - (1 - confidence) / size


def holm_adjusted(p_values: list[float]) -> list[float]:
    """Holm's adjusted p-values, in the input's order: p_(i) * (m - i + 1), made monotone, capped at 1."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def _downgrade(check, why: str, confidence: float) -> None:
    c = check.comparison
    low, high = -c["ci95"][1], -c["ci95"][0]
    sd = item_spread(low, high, c["n"], c["confidence"], c.get("sd"))
    check.verdict = Verdict(INCONCLUSIVE, f"{check.verdict.reason}, but not after the family-wise correction "
                            f"({why})", items_to_resolve(sd, check.drop, confidence))


def correct(checks: list, family: Family) -> None:
    """Re-decide the regression calls of `checks` (every accuracy check of the family) under its correction."""
    method = family.method
    tested = [c for c in checks if c.comparison]
    if method == "Holm":
        with_p = [c for c in tested if c.comparison.get("p") is not None]
        for check, p_adj in zip(with_p, holm_adjusted([c.comparison["p"] for c in with_p])):
            check.comparison["p_family"] = p_adj
            if check.verdict.outcome == REGRESSION and p_adj >= family.alpha:
                _downgrade(check, f"Holm-adjusted p={p_adj:.3g} >= {family.alpha:g} over {family.size} checks",
                           1 - family.alpha / family.size)
    elif method == "Bonferroni":
        for check in tested:
            low = -check.comparison["family_ci"][1]
            if check.verdict.outcome == REGRESSION and low <= check.margin:
                _downgrade(check, f"lower bound {low:+.3f} <= margin {check.margin:.3f} at confidence "
                           f"{1 - family.alpha / family.size:.4g} over {family.size} checks",
                           1 - family.alpha / family.size)
