"""The reasoning-length check of `quant gate` (policy `max_reasoning_ratio`, e.g. 1.2): per task whose answers
carry a reasoning trace, the candidate's mean trace tokens over the baseline's on the same items, with a paired
bootstrap interval, against the ratio. Quantization can keep a reasoning model's score while its traces grow
(and its serving cost with them), and trace growth comes with accuracy loss where it goes further."""

from __future__ import annotations

import numpy as np

from core.recipe import Gates
from evals.stats import bootstrap_group_means
from reports.gate_check import Check, GateInputError
from reports.gate_rules import decide
from reports.samples import paired_ids

METRIC = "reasoning_tokens"


def ratio_interval(base: list[float], cand: list[float], confidence: float) -> tuple[float, float, float]:
    """sum(cand) / sum(base) over paired items, and its percentile bootstrap interval resampling the items."""
    b, c = np.asarray(base, dtype=float), np.asarray(cand, dtype=float)
    if b.sum() == 0:
        return (float("inf"), float("inf"), float("inf")) if c.sum() else (1.0, 1.0, 1.0)
    ratios = bootstrap_group_means(c, b)
    ratios = ratios[np.isfinite(ratios)]
    alpha = 1 - confidence
    low, high = (float(np.quantile(ratios, q)) for q in (alpha / 2, 1 - alpha / 2))
    ratio = float(c.sum() / b.sum())
    return ratio, min(low, ratio), max(high, ratio)


def reasoning_checks(baseline: dict, candidate: dict, policy: Gates, side_items) -> list[Check]:
    """side_items(side, task, metric): a side's per-item values (reports.gate.side_items)."""
    limit = policy.max_reasoning_ratio
    if limit is None:
        return []
    tasks = [t for t, acc in baseline.get("accuracy", {}).items() if (acc or {}).get(METRIC)]
    if not tasks:
        raise GateInputError(f"{baseline['_path']}: max_reasoning_ratio set but baseline {baseline['name']} records "
                             f"no reasoning traces (accuracy.<task>.reasoning_tokens: a task with `reasoning`)")
    checks = []
    for task in tasks:
        base, cand = side_items(baseline, task, METRIC), side_items(candidate, task, METRIC)
        if base is None or cand is None:
            raise GateInputError(f"{(candidate if base else baseline)['_path']}: {task}: no per-item reasoning "
                                 f"lengths (variants/<name>/evals/{task}.jsonl): max_reasoning_ratio cannot be checked")
        pairs = paired_ids(base, cand)
        b = [base.items[i].score for i, _ in pairs]
        c = [cand.items[j].score for _, j in pairs]
        if not pairs:
            raise GateInputError(f"{cand.path}: {task}: no items in common with the baseline's")
        ratio, low, high = ratio_interval(b, c, policy.confidence)
        verdict = decide(policy.rule, ratio - 1, low - 1, high - 1, len(pairs), limit - 1, policy.min_n,
                         policy.confidence, "paired bootstrap of the ratio")
        verdict.reason = (f"reasoning {ratio:.2f}x the baseline's ({np.mean(c):.0f} vs {np.mean(b):.0f} tokens, "
                          f"CI {low:.2f}x..{high:.2f}x) against at most {limit:.2f}x: " + verdict.reason)
        checks.append(Check(task, METRIC, float(np.mean(b)), float(np.mean(c)), ratio - 1, limit - 1, verdict,
                            {},
                            evidence=f"mean reasoning tokens of {len(pairs)} paired items, ratio CI {low:.2f}x..{high:.2f}x",
                            n_baseline=len(base.items), n_candidate=len(cand.items), n_paired=len(pairs)))
    return checks
