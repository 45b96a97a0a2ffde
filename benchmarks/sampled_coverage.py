"""Coverage of the gate's paired interval on sampled tasks: each item answered K times per side, its score the
success rate, the candidate against the baseline item by item (evals.stats.paired_difference: Tango's interval
for K = 1, where rates are 0/1; the paired t with its Bernoulli-bounded far end for K > 1).

Items are drawn afresh each simulation from a population whose per-item success chances spread as real tasks'
do (Beta(0.6, 0.4): most items nearly always or nearly never solved, some in between). The candidate's chance
on an item is the baseline's, or lower: by 0.05 on every item ("uniform"), or by 0.3 on one item in ten
("few items"). The K samples are independent between the sides, or share their random numbers ("same seeds":
a sample of both sides seeded alike, as `quant sweep` seeds them, falls on the same side of both chances).
The truth is the population's mean change of success chance; the interval covers it or not.

Usage: python benchmarks/sampled_coverage.py [--sims 1000] [--ks 1,2,4,8,16] [--ns 30,100,164,250,500]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from evals.stats import paired_difference

CONFIDENCE = 0.95
ALPHA, BETA = 0.6, 0.4
SCENARIOS = {"none": (1.0, 0.0), "uniform": (1.0, 0.05), "few items": (0.1, 0.3)}   # (share of items hit, loss)


def _truth(share: float, loss: float, draws: int = 2_000_000, seed: int = 99) -> float:
    p = np.random.default_rng(seed).beta(ALPHA, BETA, draws)
    return -share * float(np.minimum(p, loss).mean())


def _simulate(rng, n: int, k: int, share: float, loss: float, same_seeds: bool) -> tuple[np.ndarray, np.ndarray]:
    p = rng.beta(ALPHA, BETA, n)
    hit = rng.random(n) < share
    q = np.where(hit, np.maximum(p - loss, 0.0), p)
    u = rng.random((n, k))
    v = u if same_seeds else rng.random((n, k))
    return (u < p[:, None]).mean(axis=1), (v < q[:, None]).mean(axis=1)


def coverage(n: int, k: int, scenario: str, same_seeds: bool, sims: int, seed: int = 0) -> tuple[float, float]:
    """(share of intervals that cover the truth, their mean width)."""
    share, loss = SCENARIOS[scenario]
    truth = _truth(share, loss)
    rng = np.random.default_rng(seed)
    covered, width = 0, 0.0
    for _ in range(sims):
        base, cand = _simulate(rng, n, k, share, loss, same_seeds)
        low, high = paired_difference(base.tolist(), cand.tolist(), confidence=CONFIDENCE)["ci95"]
        covered += low - 1e-12 <= truth <= high + 1e-12
        width += high - low
    return covered / sims, width / sims


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sims", type=int, default=1000)
    parser.add_argument("--ks", default=",".join(str(k) for k in range(1, 17)))
    parser.add_argument("--ns", default="30,100,164,250,500")
    args = parser.parse_args()
    ks, ns = [int(x) for x in args.ks.split(",")], [int(x) for x in args.ns.split(",")]
    started = time.time()
    print(f"Coverage of the gate's 95% paired interval on per-item success rates, {args.sims} simulations a cell")
    for same in (False, True):
        for scenario in SCENARIOS:
            print(f"\n{scenario}, {'same seeds' if same else 'independent samples'} "
                  f"(truth {_truth(*SCENARIOS[scenario]):+.4f}); rows K, columns items: coverage (mean width)")
            print("| K | " + " | ".join(f"n={n}" for n in ns) + " |")
            print("|---|" + "---|" * len(ns))
            worst = 1.0
            for k in ks:
                cells = [coverage(n, k, scenario, same, args.sims, seed=k * 1000 + n) for n in ns]
                worst = min(worst, *(c for c, _ in cells))
                print(f"| {k} | " + " | ".join(f"{c:.3f} ({w:.3f})" for c, w in cells) + " |")
            print(f"lowest coverage: {worst:.3f}")
    print(f"\n{time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
