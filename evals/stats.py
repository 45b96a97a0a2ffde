"""Confidence intervals for per-sample scores."""

from __future__ import annotations

import math

import numpy as np

Z95 = 1.959963984540054


def wilson(successes: float, n: int, z: float = Z95) -> tuple[float, float]:
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    low = 0.0 if successes == 0 else max(0.0, centre - half)  # exact ends: no 1e-17 rounding residue
    high = 1.0 if successes == n else min(1.0, centre + half)
    return (low, high)


def bootstrap_mean(values: list[float], iters: int = 2000, seed: int = 0) -> tuple[float, float]:
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return (0.0, 1.0)
    idx = np.random.default_rng(seed).integers(0, arr.size, size=(iters, arr.size))
    means = arr[idx].mean(axis=1)
    return (float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975)))


def cluster_bootstrap_mean(values: list[float], groups: list, iters: int = 2000, seed: int = 0
                           ) -> tuple[float, float]:
    """Percentile bootstrap that resamples whole groups: items of one group (variants of one problem, one
    template, one document) are not independent, and an item-level interval would be too narrow."""
    keys = sorted(set(groups), key=str)
    index = {k: i for i, k in enumerate(keys)}
    sums, counts = np.zeros(len(keys)), np.zeros(len(keys))
    for v, g in zip(values, groups):
        sums[index[g]] += v
        counts[index[g]] += 1
    picks = np.random.default_rng(seed).integers(0, len(keys), size=(iters, len(keys)))
    means = sums[picks].sum(axis=1) / counts[picks].sum(axis=1)
    return (float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975)))


def mean_ci(values: list[float], groups: list | None = None) -> dict:
    """Mean with a 95% CI: Wilson for 0/1 scores, percentile bootstrap for anything else; with `groups`
    (one per item, some shared), a bootstrap over groups."""
    n = len(values)
    if groups is not None and n and len(groups) == n and 1 < len(set(groups)) < n:
        mean = float(np.mean(values))
        low, high = cluster_bootstrap_mean(values, groups)
        return {"value": mean, "n": n, "ci95": [min(low, mean), max(high, mean)], "ci_method": "cluster-bootstrap",
                "groups": len(set(groups))}
    mean = float(np.mean(values)) if n else 0.0
    binary = all(v in (0.0, 1.0) for v in values)
    low, high = wilson(sum(values), n) if binary else bootstrap_mean(values)
    low, high = min(low, mean), max(high, mean)  # a percentile bootstrap of a skewed sample can miss the mean
    return {"value": mean, "n": n, "ci95": [low, high], "ci_method": "wilson" if binary else "bootstrap"}


def mcnemar_exact(lost: int, gained: int) -> float:
    """Two-sided exact McNemar p-value: a binomial test on the discordant pairs."""
    n = lost + gained
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(lost, gained) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def paired_difference(base: list[float], cand: list[float], z: float = Z95) -> dict:
    """candidate - baseline on the same items: the mean difference with a 95% CI, flips and McNemar's p.

    For 0/1 scores the interval is Bonett-Price's adjusted Wald for paired proportions (sane when no item
    flipped); for graded scores, a normal interval on the per-item differences.
    """
    b, c = np.asarray(base, dtype=float), np.asarray(cand, dtype=float)
    if b.shape != c.shape:
        raise ValueError(f"paired scores need the same items ({b.size} vs {c.size})")
    n = b.size
    lost, gained = int((c < b).sum()), int((c > b).sum())
    diff = float((c - b).mean()) if n else 0.0
    binary = bool(np.isin(b, (0.0, 1.0)).all() and np.isin(c, (0.0, 1.0)).all())
    if binary:
        p_lost, p_gained = (lost + 1) / (n + 2), (gained + 1) / (n + 2)
        centre = p_gained - p_lost
        half = z * math.sqrt(max(p_lost + p_gained - centre ** 2, 0.0) / (n + 2))
        low, high = centre - half, centre + half
    else:
        half = z * float((c - b).std(ddof=1)) / math.sqrt(n) if n > 1 else math.inf
        low, high = diff - half, diff + half
    return {"n": n, "diff": diff, "ci95": [max(low, -1.0), min(high, 1.0)], "lost": lost, "gained": gained,
            "mcnemar_p": mcnemar_exact(lost, gained) if binary else None, "method": "paired"}


def unpaired_difference(base: list[float], cand: list[float], z: float = Z95) -> dict:
    """What lm-eval's model comparison does: a z-interval from each side's own standard error."""
    b, c = np.asarray(base, dtype=float), np.asarray(cand, dtype=float)
    se = math.sqrt(b.var(ddof=1) / b.size + c.var(ddof=1) / c.size) if min(b.size, c.size) > 1 else math.inf
    diff = float(c.mean() - b.mean())
    return {"n": int(min(b.size, c.size)), "diff": diff, "ci95": [diff - z * se, diff + z * se],
            "method": "unpaired"}
