"""Confidence intervals for per-sample scores."""

from __future__ import annotations

import math

import numpy as np
from scipy.special import ndtri, stdtr, stdtrit   # scipy.stats costs a CLI half a second more

from evals import paired_binary

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


BOOTSTRAP_CELLS = 1 << 20   # resample counts held at once: memory stays bounded whatever n and B


def bootstrap_group_means(sums: np.ndarray, sizes: np.ndarray, iters: int = 2000, seed: int = 0) -> np.ndarray:
    """Means of `iters` bootstrap resamples of whole groups (each given by its sum and its size), drawn a
    chunk of resamples at a time, so memory is about BOOTSTRAP_CELLS indices rather than iters x n."""
    g = sums.size
    rng = np.random.default_rng(seed)
    rows = max(1, BOOTSTRAP_CELLS // g)
    means = np.empty(iters)
    for start in range(0, iters, rows):
        picks = rng.integers(0, g, size=(min(rows, iters - start), g))
        means[start:start + picks.shape[0]] = sums[picks].sum(axis=1) / sizes[picks].sum(axis=1)
    return means


def _group_sums(values, groups) -> tuple[np.ndarray, np.ndarray]:
    keys = sorted(set(groups), key=str)
    index = {k: i for i, k in enumerate(keys)}
    at = np.fromiter((index[g] for g in groups), dtype=int, count=len(groups))
    return (np.bincount(at, weights=np.asarray(values, dtype=float), minlength=len(keys)),
            np.bincount(at, minlength=len(keys)).astype(float))


def _percentiles(means: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    alpha = 1 - confidence
    return (float(np.quantile(means, alpha / 2)), float(np.quantile(means, 1 - alpha / 2)))


def bootstrap_mean(values: list[float], iters: int = 2000, seed: int = 0) -> tuple[float, float]:
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return (0.0, 1.0)
    return _percentiles(bootstrap_group_means(arr, np.ones(arr.size), iters, seed))


def cluster_bootstrap_mean(values: list[float], groups: list, iters: int = 2000, seed: int = 0
                           ) -> tuple[float, float]:
    """Percentile bootstrap that resamples whole groups: items of one group (variants of one problem, one
    template, one document) are not independent, and an item-level interval would be too narrow."""
    return _percentiles(bootstrap_group_means(*_group_sums(values, groups), iters, seed))


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
    """Two-sided exact McNemar p-value: a binomial test (p = 1/2) on the discordant pairs."""
    return float(paired_binary.mcnemar_exact(lost, gained))


def binary_spread(lost: int, gained: int, n: int) -> float:
    """The standard deviation of one item's difference of 0/1 scores at these rates, at least that of a flip
    rate of 3/n: no flip in n items still leaves a rate of up to about 3/n (the rule of three)."""
    diff = (gained - lost) / n
    return math.sqrt(max((lost + gained) / n - diff * diff, min(1.0, 3 / n)))


def _t_interval(d: np.ndarray, confidence: float) -> tuple[float, float, float | None]:
    n, mean = d.size, float(d.mean())
    sd = float(d.std(ddof=1)) if n > 1 else math.nan
    if not math.isfinite(sd):
        return (-math.inf, math.inf, None)
    if sd == 0:
        return (mean, mean, 1.0 if mean == 0 else 0.0)
    se = sd / math.sqrt(n)
    half = float(stdtrit(n - 1, 0.5 + confidence / 2)) * se
    return (mean - half, mean + half, float(2 * stdtr(n - 1, -abs(mean) / se)))


def z_for(confidence: float) -> float:
    return float(ndtri(0.5 + confidence / 2))


def changed_rate_upper(changed, n, z: float = Z95):
    """Wilson's upper end for the share of items that changed (elementwise)."""
    p = changed / n
    return (p + z * z / (2 * n) + z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / (1 + z * z / n)


def bounded_t_interval(d: np.ndarray, confidence: float) -> tuple[float, float, float | None, float]:
    """Paired t for differences of scores within [0, 1], its end away from 0 widened by what the share of
    changed items could still be. When few items change, the t's spread rests on those few, and a sample
    with fewer or smaller changes than the truth has both a mean nearer 0 and a smaller spread: a t interval
    on 30 items, 10% of them losing a skewed amount, covers 0.79. The far end's variance adds
    (u - k/n) * m2 to the t's: k of n items changed, u the Wilson upper end of that share (the 0/1 case's
    bound on the flip rate), m2 a changed item's mean squared change with one more change the size of the
    largest (1, the bound, when none changed). Where every item changes u = k/n and this is the t interval.
    The end towards 0 is the t's, so the interval excludes 0 exactly when the t-test's p < 1 - confidence.
    Coverage by benchmarks/interval_coverage.py: 0.95-0.97 from about 10 changed items, 0.93 with 5.
    Returns (low, high, p of the t test about 0, the far end's spread of one item's difference)."""
    n, mean = d.size, float(d.mean())
    low, high, p = _t_interval(d, confidence)
    if n < 2:
        return (low, high, p, math.nan)
    changed = int(np.count_nonzero(d))
    m2 = (float((d * d).sum()) + float(np.abs(d).max()) ** 2) / (changed + 1) if changed else 1.0
    excess = float(changed_rate_upper(changed, n, z_for(confidence))) - changed / n
    sd = math.sqrt(float(d.var(ddof=1)) + excess * m2)
    far = float(stdtrit(n - 1, 0.5 + confidence / 2)) * sd / math.sqrt(n)
    if mean <= 0:
        low = mean - far
    if mean >= 0:
        high = mean + far
    return (low, high, p, sd)


def _cluster_interval(d: np.ndarray, groups: list, confidence: float) -> tuple[float, float, float, float]:
    """Cluster-robust t interval of the mean difference: the spread of the groups' sums around the mean
    (times G / (G - 1)) and Student's t with G - 1 degrees of freedom. A percentile bootstrap of the groups
    covers 76-81% instead of 95% with 5 groups, 86-88% with 10 (benchmarks/interval_coverage.py); this 92-96%.
    Returns (low, high, p of the t test about 0, the standard error)."""
    sums, sizes = _group_sums(d, groups)
    g, total = sums.size, sizes.sum()
    mean = float(sums.sum() / total)
    se = math.sqrt(g / (g - 1) * float(((sums - mean * sizes) ** 2).sum())) / total
    if se == 0:
        return (mean, mean, 1.0 if mean == 0 else 0.0, 0.0)
    half = float(stdtrit(g - 1, 0.5 + confidence / 2)) * se
    return (mean - half, mean + half, float(2 * stdtr(g - 1, -abs(mean) / se)), se)


def _zero_spread_floor(d: np.ndarray, confidence: float) -> tuple[float, float, float] | None:
    """Where every item's difference is the same c != 0, a t interval is the point c with p = 0, though a
    handful of equal changes is no evidence of that: the gate's 0/1 interval and exact McNemar on the signs
    of the changes (n items, all lost or all gained), scaled by |c|. None where the spread is not 0 or c = 0."""
    if d.size == 0 or float(np.ptp(d)) != 0 or d[0] == 0:
        return None
    lost, gained = (d.size, 0) if d[0] < 0 else (0, d.size)
    low, high = paired_binary.paired_binary_interval(lost, gained, d.size, confidence)
    size = abs(float(d[0]))
    return (float(low) * size, float(high) * size, mcnemar_exact(lost, gained))


def _ungrouped(b: np.ndarray, c: np.ndarray, d: np.ndarray, binary: bool, higher_is_better: bool,
               confidence: float) -> tuple[float, float, float | None, dict]:
    """The interval and test about 0 of the items taken one by one: (low, high, p, fields to report)."""
    n, lost, gained = d.size, int((d < 0).sum()), int((d > 0).sum())
    if binary:
        low, high = (float(end) for end in paired_binary.paired_binary_interval(lost, gained, n, confidence))
        return low, high, mcnemar_exact(lost, gained), {"test": "exact McNemar", "interval": "Tango score",
                                                        "sd": binary_spread(lost, gained, n)}
    if higher_is_better and bool(((b >= 0) & (b <= 1) & (c >= 0) & (c <= 1)).all()):
        low, high, p, sd = bounded_t_interval(d, confidence)
        fields = {"test": "paired t", "interval": "t, Bernoulli-bounded far end", "sd": sd}
    else:
        low, high, p = _t_interval(d, confidence)
        fields = {"test": "paired t", "sd": float(d.std(ddof=1)) if n > 1 else math.nan}
        if n > 1 and not d.any():
            fields["undecidable"] = (f"every one of the {n} items scored the same on both sides and the scores "
                                     "have no bound: no interval can be estimated from a spread of 0")
            return -math.inf, math.inf, None, fields
    floor = _zero_spread_floor(d, confidence)
    if floor is not None:
        low, high, p = min(low, floor[0]), max(high, floor[1]), max(p if p is not None else 0.0, floor[2])
        fields["interval"] = fields.get("interval", "t") + ", at least exact McNemar's on the signs (no spread)"
    return low, high, p, fields


def paired_difference(base: list[float], cand: list[float], groups: list | None = None,
                      confidence: float = 0.95, higher_is_better: bool = True) -> dict:
    """The candidate's change against the baseline on the same items: mean, interval, flips and the p-value
    of the test about 0 (the interval excludes 0 exactly when p < 1 - confidence), and `sd`: the spread of one
    item's difference that sizes "how many items would decide it".

    `diff` and `ci95` are oriented so that positive is better (candidate - baseline, negated when lower is
    better); `lost`/`gained` count items the candidate scored worse/better on. The test, by data:
    - 0/1 scores: exact McNemar about 0, and Tango's score interval (evals/paired_binary.py), which reaches
      0 wherever exact McNemar does not reject, so the interval excludes 0 exactly when p < 1 - confidence;
    - graded scores: a t interval on the per-item differences (and its t-test p); for scores within [0, 1]
      where higher is better (F1, partial credit: bounded), its end away from 0 widened by what the share of
      changed items could still be (`bounded_t_interval`), which matters only where few items change. Where
      every item changed by the same amount (no spread), at least exact McNemar's interval on the signs,
      scaled by that amount; where no item changed and the scores have no bound, no interval (`undecidable`);
    - items in groups (some group with several items): a cluster-robust t on the groups' differences, and at
      least the interval and p of the items taken one by one: declaring groups can only widen the interval
      (a cluster t of groups that all changed alike, or not at all, has no spread and would be a point).
    """
    b, c = np.asarray(base, dtype=float), np.asarray(cand, dtype=float)
    if b.shape != c.shape:
        raise ValueError(f"paired scores need the same items ({b.size} vs {c.size})")
    if b.size == 0:
        raise ValueError("paired scores need at least one item")
    n = b.size
    d = (c - b) if higher_is_better else (b - c)
    binary = bool(np.isin(b, (0.0, 1.0)).all() and np.isin(c, (0.0, 1.0)).all())
    out = {"n": n, "diff": float(d.mean()), "lost": int((d < 0).sum()), "gained": int((d > 0).sum()),
           "mcnemar_p": None, "method": "paired", "confidence": confidence}
    low, high, p, fields = _ungrouped(b, c, d, binary, higher_is_better, confidence)
    if binary:
        out["mcnemar_p"] = p
    if groups is not None and len(groups) == n and 1 < len(set(groups)) < n:
        c_low, c_high, c_p, se = _cluster_interval(d, groups, confidence)
        alone = fields["test"]
        fields = fields | {"test": "paired cluster t", "groups": len(set(groups)),
                           "sd": max(se * math.sqrt(n), fields["sd"]) if math.isfinite(fields["sd"]) else fields["sd"],
                           "interval": f"cluster t, at least the items' own ({alone})"}
        if p is not None and p > c_p:
            fields["test"] = f"{alone} (items ungrouped; the paired cluster t's p={c_p:.3g})"
        low, high = min(low, c_low), max(high, c_high)
        p = None if p is None else max(p, c_p)
    return out | fields | {"ci95": [low, high], "p": p}


def unpaired_difference(base: list[float], cand: list[float], z: float = Z95) -> dict:
    """What lm-eval's model comparison does: a z-interval from each side's own standard error."""
    b, c = np.asarray(base, dtype=float), np.asarray(cand, dtype=float)
    se = math.sqrt(b.var(ddof=1) / b.size + c.var(ddof=1) / c.size) if min(b.size, c.size) > 1 else math.inf
    diff = float(c.mean() - b.mean())
    return {"n": int(min(b.size, c.size)), "diff": diff, "ci95": [diff - z * se, diff + z * se],
            "method": "unpaired"}
