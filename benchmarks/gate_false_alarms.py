"""False-alarm rate of each gate rule under the null: the baseline against a re-run of itself.

Simulation: every item has its own chance of being answered right, p_i ~ Beta with mean `accuracy` and
concentration `kappa` (small kappa: items are reliably right or wrong, as with greedy decoding; large kappa:
sampling at temperature > 0 makes each item a coin flip). Two runs draw each item independently from p_i;
the gate compares them on the same items. A false alarm is any verdict other than pass.

Usage: python benchmarks/gate_false_alarms.py [--sims 2000] [--margin 0.02]
"""

from __future__ import annotations

import argparse
from collections import Counter

import numpy as np

from evals.stats import paired_difference
from reports.gate_rules import RULES_ORDER, decide


def simulate(n: int, accuracy: float, kappa: float, margin: float, sims: int, seed: int = 0) -> dict[str, Counter]:
    rng = np.random.default_rng(seed)
    outcomes = {rule: Counter() for rule in RULES_ORDER}
    for _ in range(sims):
        p = rng.beta(accuracy * kappa, (1 - accuracy) * kappa, size=n)
        base, rerun = (rng.random(n) < p).astype(float), (rng.random(n) < p).astype(float)
        stats = paired_difference(base.tolist(), rerun.tolist())
        drop, low, high = -stats["diff"], -stats["ci95"][1], -stats["ci95"][0]
        for rule in RULES_ORDER:
            outcomes[rule][decide(rule, drop, low, high, n, margin, min_n=30, confidence=0.95).outcome] += 1
    return outcomes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=2000)
    ap.add_argument("--margin", type=float, default=0.02)
    args = ap.parse_args()
    print(f"margin {args.margin}, {args.sims} simulated re-runs per row; cells: regression% / inconclusive%")
    print(f"{'n':>5} {'acc':>5} {'kappa':>6}  " + "  ".join(f"{r:>17}" for r in RULES_ORDER))
    for n in (100, 250, 1000):
        for kappa in (0.5, 5.0):
            out = simulate(n, 0.8, kappa, args.margin, args.sims)
            cells = [f"{100 * out[r]['regression'] / args.sims:7.1f}/{100 * out[r]['inconclusive'] / args.sims:5.1f}%"
                     for r in RULES_ORDER]
            print(f"{n:5d} {0.8:5.2f} {kappa:6.1f}  " + "  ".join(f"{c:>17}" for c in cells))


if __name__ == "__main__":
    main()
