"""False-alarm rate of each gate rule under the null: the baseline against a re-run of itself.

Simulation: every item has its own chance of being answered right, p_i ~ Beta with mean `accuracy` and
concentration `kappa` (small kappa: items are reliably right or wrong, as with greedy decoding; large kappa:
sampling at temperature > 0 makes each item a coin flip). Two runs draw each item independently from p_i;
the gate compares them on the same items. A false alarm is any verdict other than pass.

Grouped items: 25 groups of 10 items that flip together (one draw per group and run: variants of one
problem, one template). `--ignore-groups` pairs them as 250 independent items, as the gate did before it
resampled groups; by default the paired interval is the paired cluster bootstrap.

Usage: python benchmarks/gate_false_alarms.py [--sims 2000] [--margin 0.02] [--ignore-groups]
"""

from __future__ import annotations

import argparse
from collections import Counter

import numpy as np

from evals.stats import paired_difference
from reports.gate_rules import RULES_ORDER, decide


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


def _row(label: str, out: dict, sims: int) -> str:
    cells = [f"{100 * out[r]['regression'] / sims:7.1f}/{100 * out[r]['inconclusive'] / sims:5.1f}%"
             for r in RULES_ORDER]
    return f"{label:<34}" + "  ".join(f"{c:>17}" for c in cells)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=2000)
    ap.add_argument("--margin", type=float, default=0.02)
    ap.add_argument("--ignore-groups", action="store_true", help="pair grouped items as independent ones")
    args = ap.parse_args()
    print(f"{args.sims} simulated re-runs per row; cells: regression% / inconclusive%")
    print(f"{'':<34}" + "  ".join(f"{r:>17}" for r in RULES_ORDER))
    for n in (100, 250, 1000):
        for kappa in (0.5, 5.0):
            out = simulate(n, 0.8, kappa, args.margin, args.sims)
            print(_row(f"n={n} acc=0.8 kappa={kappa} margin={args.margin}", out, args.sims))
    how = "as independent items" if args.ignore_groups else "paired cluster bootstrap"
    for margin in (args.margin, 0.0):
        out = simulate(250, 0.6, 5.0, margin, args.sims, group_size=10, ignore_groups=args.ignore_groups)
        print(_row(f"25 groups x 10 margin={margin}", out, args.sims) + f"   ({how})")


if __name__ == "__main__":
    main()
