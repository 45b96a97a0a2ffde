"""False-alarm rate of each gate rule under the null: the baseline against a re-run of itself.

Simulation: every item has its own chance of being answered right, p_i ~ Beta with mean `accuracy` and
concentration `kappa` (small kappa: items are reliably right or wrong, as with greedy decoding; large kappa:
sampling at temperature > 0 makes each item a coin flip). Two runs draw each item independently from p_i;
the gate compares them on the same items. A false alarm is any verdict other than pass.

Grouped items: 25 groups of 10 items that flip together (one draw per group and run: variants of one
problem, one template). `--ignore-groups` pairs them as 250 independent items; by default the paired
interval is the paired cluster t (over the groups).

Several tasks: a candidate that lost nothing is gated on 5 tasks at once, and a family-wise false alarm is a
regression called on any of them. Each task alone is decided at the nominal level (95% two-sided: a false
regression at most 2.5% of the time); over five the chance of at least one grows towards 1 - 0.975^5 = 12%.
The gate's correction (reports/family.py: Holm for `significant`, Bonferroni for a `non-inferiority`
regression call) is shown beside the uncorrected rate.

Shipped task sizes: SmolLM2's recipe (humaneval_mc 132 items, extraction_mc 100, math_mc 200; margin 0.05) and
the demo's (250 items per task; margins 0.05 and 0.03). With a share `flips` of items flipping and a true
drop D, an item is lost with chance (flips + D) / 2 and gained with (flips - D) / 2. Per rule and true drop
(0, half the margin, the margin, twice the margin): how often the gate calls a regression, passes, or cannot
decide. Within the margin (0 and half of it) a regression is a false alarm; at twice the margin a pass is a miss.

Usage: python benchmarks/gate_false_alarms.py [--sims 2000] [--margin 0.02] [--ignore-groups] [--tasks 5]
       python benchmarks/gate_false_alarms.py --shipped [--sims 2000] [--flips 0.15 0.05]
"""

from __future__ import annotations

import argparse
from collections import Counter

import numpy as np

from evals.paired_binary import mcnemar_exact, paired_binary_interval
from evals.stats import binary_spread, paired_difference
from reports.family import Family, correct, family_confidence
from reports.gate import Check
from reports.gate_rules import PASS, REGRESSION, RULES_ORDER, decide

CONFIDENCE = 0.95


def _verdicts(outcomes: dict, stats: dict, n: int, margin: float) -> None:
    drop, low, high = -stats["diff"], -stats["ci95"][1], -stats["ci95"][0]
    for rule in RULES_ORDER:
        outcomes[rule][decide(rule, drop, low, high, n, margin, min_n=30, confidence=0.95).outcome] += 1


def simulate(n: int, accuracy: float, kappa: float, margin: float, sims: int, seed: int = 0,
             group_size: int = 1, ignore_groups: bool = False) -> dict[str, Counter]:
    rng = np.random.default_rng(seed)
    outcomes = {rule: Counter() for rule in RULES_ORDER}
    n_groups = n // group_size
    groups = np.repeat(np.arange(n_groups), group_size).tolist()
    for _ in range(sims):
        p = rng.beta(accuracy * kappa, (1 - accuracy) * kappa, size=n_groups)
        base = np.repeat((rng.random(n_groups) < p).astype(float), group_size)
        rerun = np.repeat((rng.random(n_groups) < p).astype(float), group_size)
        if group_size == 1 or ignore_groups:
            stats = paired_difference(base.tolist(), rerun.tolist())
        else:
            stats = paired_difference(base.tolist(), rerun.tolist(), groups=groups)
        _verdicts(outcomes, stats, n, margin)
    return outcomes


def _task_checks(rule: str, margin: float, n: int, runs: list[tuple[np.ndarray, np.ndarray]],
                 family_level: float | None) -> list[Check]:
    checks = []
    for task, (base, rerun) in enumerate(runs):
        stats = paired_difference(base.tolist(), rerun.tolist(), confidence=CONFIDENCE)
        if family_level:
            stats["family_ci"] = paired_difference(base.tolist(), rerun.tolist(), confidence=family_level)["ci95"]
        drop, low, high = -stats["diff"], -stats["ci95"][1], -stats["ci95"][0]
        verdict = decide(rule, drop, low, high, n, margin, 30, CONFIDENCE, stats["test"], stats["p"])
        checks.append(Check(f"task{task}", "acc", 0.0, 0.0, drop, margin, verdict, stats))
    return checks


def simulate_family(tasks: int, n: int, accuracy: float, kappa: float, margin: float, sims: int,
                    seed: int = 0) -> dict[str, dict[str, float]]:
    """Per rule: the share of re-runs (no true difference on any task) with a regression called on any task,
    each task decided alone ("uncorrected") and as one family ("corrected"), and on the first task alone."""
    rng = np.random.default_rng(seed)
    counts = {rule: Counter() for rule in RULES_ORDER}
    for _ in range(sims):
        runs = []
        for _ in range(tasks):
            p = rng.beta(accuracy * kappa, (1 - accuracy) * kappa, size=n)
            runs.append(((rng.random(n) < p).astype(float), (rng.random(n) < p).astype(float)))
        for rule in RULES_ORDER:
            family = Family([f"task{t}" for t in range(tasks)], ["rerun"], rule, round(1 - CONFIDENCE, 10), "holm")
            checks = _task_checks(rule, margin, n, runs, family_confidence(rule, CONFIDENCE, tasks, "holm"))
            regressed = [c.verdict.outcome == REGRESSION for c in checks]
            counts[rule]["one task"] += regressed[0]
            counts[rule]["uncorrected"] += any(regressed)
            correct(checks, family)
            counts[rule]["corrected"] += any(c.verdict.outcome == REGRESSION for c in checks)
    return {rule: {k: c[k] / sims for k in ("one task", "uncorrected", "corrected")} for rule, c in counts.items()}


def _family_rows(tasks: int, margin: float, sims: int) -> list[str]:
    lines = [f"{tasks} tasks of 200 items each, acc=0.8 kappa=5, margin={margin}, {sims} simulated re-runs: "
             f"share with a regression called (false alarm)",
             f"{'rule':<17}{'one task':>10}{f'any of {tasks}, uncorrected':>28}{'any, corrected':>16}  correction"]
    for rule, rates in simulate_family(tasks, 200, 0.8, 5.0, margin, sims).items():
        method = Family([""] * tasks, ["v"], rule, 1 - CONFIDENCE, "holm").method or "none (no test)"
        lines.append(f"{rule:<17}{100 * rates['one task']:>9.1f}%{100 * rates['uncorrected']:>27.1f}%"
                     f"{100 * rates['corrected']:>15.1f}%  {method}")
    return lines


def _row(label: str, out: dict, sims: int) -> str:
    cells = [f"{100 * out[r]['regression'] / sims:7.1f}/{100 * out[r]['inconclusive'] / sims:5.1f}%"
             for r in RULES_ORDER]
    return f"{label:<34}" + "  ".join(f"{c:>17}" for c in cells)


SHIPPED = [("extraction_mc on SmolLM2", 100, 0.05), ("humaneval_mc on SmolLM2", 132, 0.05),
           ("math_mc on SmolLM2", 200, 0.05), ("demo tasks", 250, 0.05), ("demo_extraction", 250, 0.03)]


def rule_rates(n: int, margin: float, flips: float, drop: float, sims: int, seed: int = 0) -> dict[str, Counter]:
    """Per rule: outcomes of `sims` simulated comparisons of n 0/1 items at a true drop and a share of flips."""
    rng = np.random.default_rng(seed)
    p_lost, p_gained = (flips + drop) / 2, (flips - drop) / 2
    lost = rng.binomial(n, p_lost, sims)
    gained = rng.binomial(n - lost, p_gained / (1 - p_lost))
    low, high = paired_binary_interval(lost, gained, n, CONFIDENCE)
    p = mcnemar_exact(lost, gained)
    outcomes = {rule: Counter() for rule in RULES_ORDER}
    for i in range(sims):
        observed, sd = (lost[i] - gained[i]) / n, binary_spread(int(lost[i]), int(gained[i]), n)
        for rule in RULES_ORDER:
            verdict = decide(rule, observed, -high[i], -low[i], n, margin, 30, CONFIDENCE, "exact McNemar", p[i], sd)
            outcomes[rule][verdict.outcome] += 1
    return outcomes


def shipped_rows(sims: int, flips_list: list[float]) -> list[str]:
    lines = [f"Shipped task sizes, {sims} simulated re-runs per row; cells: regression% / pass% (the rest "
             f"inconclusive). A regression at drop 0 or margin/2 is a false alarm; a pass at 2 x margin is a miss.",
             f"{'task (items, margin)':<36}{'flips':>6}{'true drop':>10}  "
             + "  ".join(f"{r:>17}" for r in RULES_ORDER)]
    for flips in flips_list:
        for name, n, margin in SHIPPED:
            for factor, label in ((0, "0"), (0.5, "m/2"), (1, "m"), (2, "2m")):
                drop = factor * margin
                if drop > flips:
                    continue
                out = rule_rates(n, margin, flips, drop, sims)
                cells = [f"{100 * out[r][REGRESSION] / sims:7.1f}/{100 * out[r][PASS] / sims:5.1f}%"
                         for r in RULES_ORDER]
                lines.append(f"{f'{name} ({n}, {margin})':<36}{flips:>6.2f}{f'{label}={drop:.3f}':>10}  "
                             + "  ".join(f"{c:>17}" for c in cells))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=2000)
    ap.add_argument("--margin", type=float, default=0.02)
    ap.add_argument("--ignore-groups", action="store_true", help="pair grouped items as independent ones")
    ap.add_argument("--tasks", type=int, default=5, help="tasks gated together in the family-wise rows")
    ap.add_argument("--shipped", action="store_true",
                    help="only the rates per rule at the shipped tasks' sizes and true drops 0, m/2, m, 2m")
    ap.add_argument("--flips", type=float, nargs="+", default=[0.15, 0.05],
                    help="shares of items that flip, for --shipped (4-bit variants flip 0.13-0.25, W8A8 0.03-0.10)")
    args = ap.parse_args()
    if args.shipped:
        print("\n".join(shipped_rows(args.sims, args.flips)))
        return
    print(f"{args.sims} simulated re-runs per row; cells: regression% / inconclusive%")
    print(f"{'':<34}" + "  ".join(f"{r:>17}" for r in RULES_ORDER))
    for n in (100, 250, 1000):
        for kappa in (0.5, 5.0):
            out = simulate(n, 0.8, kappa, args.margin, args.sims)
            print(_row(f"n={n} acc=0.8 kappa={kappa} margin={args.margin}", out, args.sims))
    how = "as independent items" if args.ignore_groups else "paired cluster t"
    for margin in (args.margin, 0.0):
        out = simulate(250, 0.6, 5.0, margin, args.sims, group_size=10, ignore_groups=args.ignore_groups)
        print(_row(f"25 groups x 10 margin={margin}", out, args.sims) + f"   ({how})")
    for margin in (0.0, args.margin):
        print()
        print("\n".join(_family_rows(args.tasks, margin, args.sims)))


if __name__ == "__main__":
    main()
