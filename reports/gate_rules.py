"""The three gate rules, as pure functions of a task's paired comparison.

drop = baseline - candidate (positive is worse); [low, high] is its confidence interval.
- point: the observed drop against the margin, as llm-compressor's own CI does (ratio of means).
- significant: a regression only when the drop is statistically significant *and* beyond the margin.
- non-inferiority: a pass only when the interval's upper end is within the margin.
When the data cannot decide, the verdict is "inconclusive" with roughly how many items would decide it.
"Significant" means the interval excludes 0, and the interval excludes 0 exactly when the named test's p <
1 - confidence (exact McNemar for 0/1 items, paired t for graded ones, the paired cluster test for grouped
ones), so a verdict never calls a drop significant beside a larger p. A margin decision compares an end of the
printed interval with the margin, so the interval and the verdict never disagree. For 0/1 items
(evals/paired_binary.py) a non-inferiority pass compares the end away from 0, Tango's (his score test at the
margin); a regression compares the end towards 0, which is Tango's where exact McNemar rejects "no difference"
and 0 where it does not, so a regression needs both tests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

from core import exit_codes

PASS, REGRESSION, INCONCLUSIVE, ERROR = "pass", "regression", "inconclusive", "error"
# Exit code of `quant gate` per outcome (the codes themselves: core/exit_codes.py).
EXIT = {PASS: exit_codes.OK, REGRESSION: exit_codes.FAILED, ERROR: exit_codes.BAD_INPUT,
        INCONCLUSIVE: exit_codes.INCONCLUSIVE}
RULES_ORDER = ("point", "significant", "non-inferiority")
POWER = 0.8


@dataclass
class Verdict:
    outcome: str
    reason: str
    items_needed: int | None = None   # total paired items that would likely decide an inconclusive case


# A drop equal to the allowed margin passes: a difference of two scores computed in floating point can land a
# few ulps above a margin it equals exactly (0.9 - 0.85 > 0.05).
MARGIN_TOLERANCE = 1e-12


def z_for(confidence: float) -> float:
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def items_to_resolve(sd: float, distance: float, confidence: float) -> int | None:
    """Items for a two-sided test at `confidence` with 80% power to tell a gap of `distance` apart."""
    if distance <= 0 or not math.isfinite(sd):
        return None
    z = z_for(confidence) + NormalDist().inv_cdf(POWER)
    return math.ceil((z * sd / distance) ** 2)


def _evidence(test: str | None, p: float | None, low: float, high: float) -> str:
    shown = [f"{test} p={p:.3g}"] if test and p is not None else [test] if test else []
    return ", ".join(shown + [f"CI {low:+.3f}..{high:+.3f}"])


def item_spread(low: float, high: float, n: int, confidence: float, sd: float | None = None) -> float:
    """The spread of one item's difference: `sd` where the comparison measured it, else the one a normal
    interval [low, high] on n items would have."""
    if sd is not None:
        return sd
    return (high - low) / (2 * z_for(confidence)) * math.sqrt(n) if n else math.inf


def decide(rule: str, drop: float, low: float, high: float, n: int, margin: float, min_n: int,
           confidence: float, test: str | None = None, p: float | None = None, sd: float | None = None) -> Verdict:
    """`test` and `p`: the test about 0 (named in the reason); `sd`: the spread of one item's difference
    (paired_difference's), which sizes the items that would decide an inconclusive check."""
    if not all(math.isfinite(x) for x in (drop, low, high, margin)):
        return Verdict(INCONCLUSIVE, f"not a finite comparison (drop {drop}, CI {low}..{high}): cannot decide")
    sd = item_spread(low, high, n, confidence, sd)
    if n < min_n:
        return Verdict(INCONCLUSIVE, f"only {n} paired items (min_n {min_n})", min_n)
    if rule == "point":
        if drop > margin + MARGIN_TOLERANCE:
            return Verdict(REGRESSION, f"drop {drop:.3f} > margin {margin:.3f}")
        return Verdict(PASS, f"drop {drop:.3f} <= margin {margin:.3f}")
    evidence = _evidence(test, p, low, high)
    if rule == "significant":
        if drop <= margin + MARGIN_TOLERANCE:
            return Verdict(PASS, f"drop {drop:.3f} within margin {margin:.3f}")
        if low > 0:
            return Verdict(REGRESSION, f"drop {drop:.3f} > margin {margin:.3f} and significant ({evidence})")
        return Verdict(INCONCLUSIVE, f"drop {drop:.3f} > margin {margin:.3f} but not significant ({evidence})",
                       items_to_resolve(sd, drop, confidence))
    if rule == "non-inferiority":
        if high <= margin + MARGIN_TOLERANCE:
            return Verdict(PASS, f"upper bound {high:+.3f} <= margin {margin:.3f} ({evidence})")
        if low > margin:
            return Verdict(REGRESSION, f"lower bound {low:+.3f} > margin {margin:.3f} ({evidence})")
        return Verdict(INCONCLUSIVE, f"CI {low:+.3f}..{high:+.3f} straddles margin {margin:.3f}"
                       + (f" ({test})" if test else ""), items_to_resolve(sd, abs(margin - drop), confidence))
    raise ValueError(f"unknown gate rule {rule!r}")
