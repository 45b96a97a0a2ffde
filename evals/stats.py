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


def mean_ci(values: list[float]) -> dict:
    """Mean with a 95% CI: Wilson for 0/1 scores, percentile bootstrap for anything else."""
    n = len(values)
    mean = float(np.mean(values)) if n else 0.0
    binary = all(v in (0.0, 1.0) for v in values)
    low, high = wilson(sum(values), n) if binary else bootstrap_mean(values)
    low, high = min(low, mean), max(high, mean)  # a percentile bootstrap of a skewed sample can miss the mean
    return {"value": mean, "n": n, "ci95": [low, high], "ci_method": "wilson" if binary else "bootstrap"}
