"""Which drop the gate can see on a sampled task of n items, K answers per item: for each true loss of success
chance, the share of simulated re-runs the gate calls a regression, by its own interval and rule
(evals.stats.paired_difference, reports.gate_rules.decide), at one check (no family-wise correction).

The baseline's per-item success chances are a run's measured rates (--run DIR --variant V --task T: the items of
variants/V/evals/T.jsonl), else drawn from Beta(0.6, 0.4) as in benchmarks/sampled_coverage.py. The candidate
loses the same on every item (its chance floored at 0). The two sides' k-th answers to an item share their random
numbers ("same seeds": the sweep seeds them alike, which couples them as long as the two models agree token for
token) or not ("independent": a quantized model whose answers diverge from the baseline's after a few tokens).
The items are drawn afresh from the population each re-run.

Usage: python benchmarks/sampled_power.py [--run DIR --variant bf16 --task T] [--n 40] [--k 5] [--margin 0.05]
"""

from __future__ import annotations

import argparse

import numpy as np

from evals.stats import paired_difference
from reports.gate_rules import REGRESSION, decide
from reports.samples import item_scores

LOSSES = (0.0, 0.05, 0.075, 0.1, 0.125, 0.15, 0.2, 0.25, 0.3)
RULES = ("point", "significant", "non-inferiority")
COUPLINGS = {"same seeds": True, "independent": False}


def regression_share(chances: np.ndarray, n: int, k: int, loss: float, rule: str, margin: float, sims: int,
                     same_seeds: bool, confidence: float = 0.95, seed: int = 0) -> float:
    """The share of `sims` re-runs of n items drawn from `chances`, K answers a side, that `rule` calls a
    regression when the candidate's chance is lower by `loss` on every item."""
    rng = np.random.default_rng(seed)
    called = 0
    for _ in range(sims):
        p = rng.choice(chances, n)
        u = rng.random((n, k))
        v = u if same_seeds else rng.random((n, k))
        base, cand = (u < p[:, None]).mean(axis=1), (v < np.maximum(p - loss, 0)[:, None]).mean(axis=1)
        stats = paired_difference(base.tolist(), cand.tolist(), confidence=confidence)
        drop, low, high = -stats["diff"], -stats["ci95"][1], -stats["ci95"][0]
        verdict = decide(rule, drop, low, high, n, margin, 0, confidence, stats["test"], stats["p"], stats.get("sd"))
        called += verdict.outcome == REGRESSION
    return called / sims


def measured_chances(run: str, variant: str, task: str, metric: str) -> np.ndarray:
    scores = item_scores(run, variant, task, metric)
    if scores is None:
        raise SystemExit(f"{run}: no per-item file of {task} for {variant}")
    return np.array([item.score for item in scores.items.values()], dtype=float)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run"), parser.add_argument("--variant", default="bf16"), parser.add_argument("--task")
    parser.add_argument("--metric", default="pass@1")
    parser.add_argument("--n", type=int, default=40)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--margin", type=float, default=0.05)
    parser.add_argument("--sims", type=int, default=1000)
    args = parser.parse_args()
    if args.run:
        chances = measured_chances(args.run, args.variant, args.task, args.metric)
        source = f"{args.variant}'s {len(chances)} measured rates on {args.task} (mean {chances.mean():.3f})"
    else:
        chances = np.random.default_rng(1).beta(0.6, 0.4, 100_000)
        source = "Beta(0.6, 0.4) chances"
    print(f"Share of {args.sims} re-runs called a regression: {args.n} items, K = {args.k}, "
          f"margin {args.margin}, items from {source}")
    print("| loss on every item | mean loss | " + " | ".join(f"{rule}, {coupling}" for coupling in COUPLINGS
                                                             for rule in RULES) + " |")
    print("|---|---|" + "---|" * len(RULES) * len(COUPLINGS))
    for loss in LOSSES:
        shares = [regression_share(chances, args.n, args.k, loss, rule, args.margin, args.sims, same)
                  for same in COUPLINGS.values() for rule in RULES]
        mean_loss = float(np.minimum(chances, loss).mean())   # an item never solved has nothing to lose
        print(f"| {loss:.3f} | {mean_loss:.3f} | " + " | ".join(f"{s:.3f}" for s in shares) + " |")


if __name__ == "__main__":
    main()
