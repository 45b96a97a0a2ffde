"""Coverage and width of every interval `quant gate` prints, beside the reference intervals, in one run.

1. 0/1 scores, paired difference: the gate's interval (Tango's score interval, reaching 0 where exact McNemar
   finds no difference: evals/paired_binary.py) against Tango's alone, Bonett-Price's adjusted Wald,
   Newcombe's hybrid score (method 10), the Wald interval and the product of two Clopper-Pearson intervals.
   Coverage is exact (a sum over every count of lost and gained items with its trinomial chance), except
   Newcombe's, which also needs the items both sides got right: simulated, 20,000 tables per cell. Then
   (1b) the exact methods on a finer one-sided grid: every n 30..500, P(lost) 0.005..0.4 in steps of 0.005.
2. "~N items would decide it": at the items the gate names for an inconclusive check, the share of simulated
   re-runs the rule decides (the gate says 80%).
3. Graded scores (the paired t, and the gate's interval for scores within [0, 1]: the t with its end away
   from 0 at least the changed items' Bernoulli bound) and grouped items (the paired cluster interval, and the
   gate's: never narrower than the items' own) by simulation, beside a percentile bootstrap; 4. throughput
   ratios from repeated runs (Welch t on log tokens/s).

Usage: python benchmarks/interval_coverage.py [--sims 4000] [--full] [--only binary|fine|items|graded|grouped|ratio]
(--full: every cell of the 0/1 grid; --only: that section alone)
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.special import betaincinv, ndtri, stdtrit
from scipy.stats import binom

from evals.paired_binary import mcnemar_exact, paired_binary_interval, tango_interval
from evals.stats import bounded_t_interval, paired_difference
from reports.gate_rules import INCONCLUSIVE, decide

CONFIDENCE = 0.95
Z = float(ndtri(0.975))
TARGET = (0.94, 0.965)
ISSUE_CELLS = [(132, 0.15, 0.10), (132, 0.05, 0.05), (200, 0.12, 0.12), (100, 0.03, 0.01), (500, 0.08, 0.05)]
GRID_N = (30, 50, 100, 132, 200, 500, 1000, 2000)
GRID_FLIPS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.4)       # share of items that flip either way
GRID_LOST_SHARE = (0.5, 0.65, 0.8, 1.0)               # of the flips, the share lost
FINE_N, FINE_STEP, FINE_MAX_LOST = (30, 500), 0.005, 0.4


# --- reference intervals for (gained - lost) / n, vectorised over counts ------------------------------------
def wald(lost, gained, n):
    d = (gained - lost) / n
    half = Z * np.sqrt(np.maximum((lost + gained) / n - d * d, 0) / n)
    return d - half, d + half


def bonett_price(lost, gained, n):
    """Bonett & Price (2012): the Wald interval with one pseudo-item added to each discordant cell."""
    pl, pg = (lost + 1) / (n + 2), (gained + 1) / (n + 2)
    d = pg - pl
    half = Z * np.sqrt(np.maximum(pl + pg - d * d, 0) / (n + 2))
    return np.maximum(d - half, -1), np.minimum(d + half, 1)


def _wilson(k, n):
    p = k / n
    denom = 1 + Z * Z / n
    centre, half = (p + Z * Z / (2 * n)) / denom, Z * np.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n)) / denom
    return centre - half, centre + half


def newcombe(both, lost, gained, neither):
    """Newcombe (1998) method 10: Wilson intervals of the two sides' scores, combined with their correlation
    phi, continuity-corrected as Newcombe's paper does (AD - BC less N/2, not below 0, where AD > BC). On his
    and Fagerland, Lydersen & Laake's example (59, 6, 16, 80) it gives the published -0.1186..-0.0046."""
    n = both + lost + gained + neither
    p_base, p_cand = (both + lost) / n, (both + gained) / n
    lb, ub = _wilson(both + lost, n)
    lc, uc = _wilson(both + gained, n)
    denom = (both + lost) * (gained + neither) * (both + gained) * (lost + neither)
    cross = both * neither - lost * gained
    cross = np.where(cross > 0, np.maximum(cross - n / 2, 0), cross)
    with np.errstate(invalid="ignore", divide="ignore"):
        phi = np.where(denom > 0, cross / np.sqrt(np.maximum(denom, 1)), 0.0)
    d = p_cand - p_base
    below = np.sqrt(np.maximum((p_cand - lc) ** 2 - 2 * phi * (p_cand - lc) * (ub - p_base) + (ub - p_base) ** 2, 0))
    above = np.sqrt(np.maximum((uc - p_cand) ** 2 - 2 * phi * (uc - p_cand) * (p_base - lb) + (p_base - lb) ** 2, 0))
    return d - below, d + above


def _clopper_pearson(k, n):
    with np.errstate(invalid="ignore"):
        low = np.where(k > 0, betaincinv(k, n - k + 1, 0.025), 0.0)
        high = np.where(k < n, betaincinv(k + 1, n - k, 0.975), 1.0)
    return np.where(n > 0, low, 0.0), np.where(n > 0, high, 1.0)


def clopper_pearson_product(lost, gained, n):
    """The flip rate's Clopper-Pearson interval times that of 2 x (share gained) - 1, each at 95%."""
    rate_low, rate_high = _clopper_pearson(lost + gained, n)
    share_low, share_high = _clopper_pearson(gained, lost + gained)
    s_low, s_high = 2 * share_low - 1, 2 * share_high - 1
    return (np.where(s_low < 0, rate_high * s_low, rate_low * s_low),
            np.where(s_high > 0, rate_high * s_high, rate_low * s_high))


EXACT_METHODS = {
    "gate (Tango + exact 0)": lambda l, g, n: paired_binary_interval(l, g, n, CONFIDENCE),
    "Tango score": lambda l, g, n: tango_interval(l, g, n, CONFIDENCE),
    "Bonett-Price": bonett_price,
    "Wald": wald,
    "CP product": clopper_pearson_product,
}


def _tables(n: int, p_lost: float, p_gained: float, tail: float = 1e-10):
    """Every (lost, gained) count with a chance above `tail`, and that chance (trinomial)."""
    lost = np.arange(int(binom.ppf(tail, n, p_lost)), int(binom.isf(tail, n, p_lost)) + 1)
    share = p_gained / (1 - p_lost) if p_lost < 1 else 0.0
    rows = []
    for k in lost:
        g = np.arange(int(binom.ppf(tail, n - k, share)), int(binom.isf(tail, n - k, share)) + 1)
        rows.append((np.full(g.size, k), g, binom.pmf(k, n, p_lost) * binom.pmf(g, n - k, share)))
    return (np.concatenate([r[0] for r in rows]).astype(float), np.concatenate([r[1] for r in rows]).astype(float),
            np.concatenate([r[2] for r in rows]))


def exact_coverage(n: int, p_lost: float, p_gained: float) -> dict[str, tuple[float, float]]:
    lost, gained, weight = _tables(n, p_lost, p_gained)
    weight = weight / weight.sum()
    truth = p_gained - p_lost
    out = {}
    for name, method in EXACT_METHODS.items():
        low, high = method(lost, gained, n)
        out[name] = (float(weight @ ((low <= truth + 1e-12) & (truth - 1e-12 <= high))), float(weight @ (high - low)))
    return out


def newcombe_coverage(n: int, p_lost: float, p_gained: float, sims: int, rng, accuracy: float = 0.7):
    p_both = max(accuracy - p_lost, 0.0)
    cells = rng.multinomial(n, [p_both, p_lost, p_gained, 1 - p_both - p_lost - p_gained], size=sims).T.astype(float)
    low, high = newcombe(*cells)
    truth = p_gained - p_lost
    return float(np.mean((low <= truth + 1e-12) & (truth - 1e-12 <= high))), float(np.mean(high - low))


def binary_section(full: bool, sims: int, rng) -> list[str]:
    names = [*EXACT_METHODS, "Newcombe"]
    head = f"{'n':>5} {'P(lost)':>8} {'P(gain)':>8}  " + "  ".join(f"{m:>22}" for m in names)
    lines = ["1. 0/1 scores, paired difference: coverage / mean width (nominal 0.95; target "
             f"{TARGET[0]}..{TARGET[1]}; Newcombe simulated, {sims * 5} tables per cell)", head]
    grid = [(n, f * s, f * (1 - s)) for n in GRID_N for f in GRID_FLIPS for s in GRID_LOST_SHARE]
    summary = {m: [] for m in names}
    for n, pl, pg in ISSUE_CELLS + grid:
        cov = exact_coverage(n, pl, pg) | {"Newcombe": newcombe_coverage(n, pl, pg, sims * 5, rng)}
        for m in names:
            summary[m].append((cov[m], (n, pl, pg)))
        if (n, pl, pg) in ISSUE_CELLS or full:
            lines.append(f"{n:>5} {pl:>8.4f} {pg:>8.4f}  " + "  ".join(f"{c:>14.3f} / {w:.3f}" for c, w in
                                                                     (cov[m] for m in names)))
    lines += ["", f"over the grid (n {GRID_N[0]}..{GRID_N[-1]}, flips {GRID_FLIPS[0]:.0%}..{GRID_FLIPS[-1]:.0%}, "
              f"lost share {GRID_LOST_SHARE}; {len(grid)} cells + the {len(ISSUE_CELLS)} above):",
              f"{'interval':<24}{'min cov':>8}{'max cov':>8}{'below':>7}{'within':>7}{'above':>7}{'mean width':>11}"]
    for m in names:
        covs = np.array([c for (c, _), _ in summary[m]])
        widths = np.array([w for (_, w), _ in summary[m]])
        within = int(((covs >= TARGET[0]) & (covs <= TARGET[1])).sum())
        lines.append(f"{m:<24}{covs.min():>8.3f}{covs.max():>8.3f}{int((covs < TARGET[0]).sum()):>7}{within:>7}"
                     f"{int((covs > TARGET[1]).sum()):>7}{widths.mean():>11.4f}")
    gate = "gate (Tango + exact 0)"
    off = [(c, cell) for (c, _), cell in summary[gate] if not TARGET[0] <= c <= TARGET[1]]
    lines.append(f"{gate}: cells outside {TARGET[0]}..{TARGET[1]}: "
                 + (", ".join(f"n={n} P(lost)={pl:.4f} P(gain)={pg:.4f}: {c:.3f}" for c, (n, pl, pg) in off)
                    or "none"))
    return lines


def fine_section() -> list[str]:
    """Exact coverage on every item count 30..500 and every P(lost) 0.005..0.4 in steps of 0.005, no gains:
    the one-sided cells where coverage is lowest, finer than the grid above. With no gains a table is its
    count of lost items alone, so each n's intervals are computed once for every count."""
    names = [m for m in EXACT_METHODS if m != "CP product"]
    p_lost = np.round(np.arange(FINE_STEP, FINE_MAX_LOST + FINE_STEP / 2, FINE_STEP), 3)
    worst = {m: (2.0, None) for m in names}
    below = {m: 0 for m in names}
    for n in range(FINE_N[0], FINE_N[1] + 1):
        lost = np.arange(n + 1, dtype=float)
        weight = binom.pmf(lost[None, :], n, p_lost[:, None])            # [P(lost), count]
        for m in names:
            low, high = EXACT_METHODS[m](lost, np.zeros_like(lost), n)
            truth = -p_lost[:, None]
            cov = (weight * ((low <= truth + 1e-12) & (truth - 1e-12 <= high))).sum(axis=1) / weight.sum(axis=1)
            below[m] += int((cov < TARGET[0]).sum())
            if cov.min() < worst[m][0]:
                worst[m] = (float(cov.min()), (n, float(p_lost[cov.argmin()])))
    cells = (FINE_N[1] - FINE_N[0] + 1) * p_lost.size
    lines = [f"1b. 0/1 scores, no gains, every n {FINE_N[0]}..{FINE_N[1]} and P(lost) {FINE_STEP}..{FINE_MAX_LOST} "
             f"in steps of {FINE_STEP} ({cells} cells, exact): the lowest coverage and where",
             f"{'interval':<24}{'min cov':>8}{'at n':>6}{'P(lost)':>9}{'cells below ' + str(TARGET[0]):>18}"]
    for m in names:
        c, (n, pl) = worst[m]
        lines.append(f"{m:<24}{c:>8.4f}{n:>6}{pl:>9.3f}{below[m]:>18}")
    return lines


# --- 2. "~N items would decide it" ------------------------------------------------------------------------
DECIDE_CASES = [   # (what, rule, n, lost, gained, margin): the first two are SmolLM2's (docs/evidence.md)
    ("extraction_mc, W4A16 RTN", "non-inferiority", 100, 12, 8, 0.05),
    ("extraction_mc, FP8", "non-inferiority", 100, 6, 2, 0.05),
    ("humaneval_mc, W4A16 RTN", "significant", 132, 20, 13, 0.05),
    ("humaneval_mc, W4A16 RTN", "non-inferiority", 132, 20, 13, 0.0),
    ("no flips, margin 0.01", "non-inferiority", 200, 0, 0, 0.01),
    ("few flips", "significant", 150, 6, 1, 0.03),
]


def _verdict(rule: str, n: int, lost: int, gained: int, margin: float):
    s = paired_difference([1.0] * lost + [0.0] * gained + [1.0] * (n - lost - gained),
                          [0.0] * lost + [1.0] * gained + [1.0] * (n - lost - gained))
    return decide(rule, -s["diff"], -s["ci95"][1], -s["ci95"][0], n, margin, 1, CONFIDENCE, s["test"], s["p"], s["sd"])


def decided_share(rule: str, n: int, p_lost: float, p_gained: float, margin: float, sims: int, rng) -> float:
    """Share of simulated re-runs on n items (true rates p_lost, p_gained) the rule decides."""
    lost = rng.binomial(n, p_lost, size=sims)
    gained = rng.binomial(n - lost, p_gained / (1 - p_lost) if p_lost < 1 else 0.0)
    low, high = paired_binary_interval(lost, gained, n, CONFIDENCE)
    p = mcnemar_exact(lost, gained)
    decided = 0
    for i in range(sims):
        drop = (lost[i] - gained[i]) / n
        verdict = decide(rule, drop, -high[i], -low[i], n, margin, 1, CONFIDENCE, "exact McNemar", p[i], 1.0)
        decided += verdict.outcome != INCONCLUSIVE
    return decided / sims


def items_section(sims: int, rng) -> list[str]:
    lines = [f"2. '~N items would decide it' (80% power): the share of {sims} simulated re-runs on N items, at the "
             "observed rates of lost and gained items, that the rule decides",
             f"{'case':<28}{'rule':<17}{'n':>5}{'lost/gained':>12}{'margin':>7}  {'printed CI of the drop':<24}"
             f"{'~N':>8}{'decided at N':>13}"]
    for what, rule, n, lost, gained, margin in DECIDE_CASES:
        verdict = _verdict(rule, n, lost, gained, margin)
        low, high = paired_binary_interval(lost, gained, n, CONFIDENCE)
        need = verdict.items_needed
        share = decided_share(rule, need, lost / n, gained / n, margin, sims, rng) if need else float("nan")
        lines.append(f"{what:<28}{rule:<17}{n:>5}{f'{lost}/{gained}':>12}{margin:>7.2f}  "
                     f"{f'{-float(high):+.3f}..{-float(low):+.3f}':<24}{need or '-':>8}{share:>12.1%}")
    return lines


# --- 3. graded scores and grouped items; 4. throughput ratios -------------------------------------------------
def _percentile_bootstrap(d: np.ndarray, iters: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """Per row of d: the percentile bootstrap interval of its mean."""
    sims, n = d.shape
    low, high = np.empty(sims), np.empty(sims)
    for i in range(sims):
        means = d[i][rng.integers(0, n, size=(iters, n))].mean(axis=1)
        low[i], high[i] = np.quantile(means, [0.025, 0.975])
    return low, high


def _t(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = d.shape[1]
    half = stdtrit(n - 1, 0.975) * d.std(axis=1, ddof=1) / np.sqrt(n)
    return d.mean(axis=1) - half, d.mean(axis=1) + half


def _sparse(rate: float, lost_share: float):
    """Items unchanged except a share `rate`, each of those losing (share `lost_share`) or gaining Beta(1,3)."""
    def draw(rng, shape):
        u, size = rng.random(shape), rng.beta(1, 3, shape)
        return np.where(u < rate * lost_share, -size, np.where(u < rate, size, 0.0))
    return draw, rate * (1 - 2 * lost_share) * 0.25


def _f1_like(rng, shape):
    base = rng.beta(2, 2, shape)
    return np.clip(base + rng.normal(-0.02, 0.1, shape), 0, 1) - base


def _shift(rng, shape):
    base = rng.beta(5, 2, shape)
    return np.clip(base - 0.05 + rng.normal(0, 0.01, shape), 0, 1) - base


GRADED = {   # per-item difference: (draw(rng, shape), true mean, scores within [0, 1]), the truth by simulation
    "F1-like: base Beta(2,2), cand = base + N(-0.02, 0.1) clipped": (_f1_like, None, True),
    "every item loses ~0.05: cand = base - N(0.05, 0.01) clipped": (_shift, None, True),
    "sparse: 95% unchanged, 5% lose Beta(1,3)": (*_sparse(0.05, 1.0), True),
    "sparse: 90% unchanged, 10% lose Beta(1,3)": (*_sparse(0.10, 1.0), True),
    "sparse: 80% unchanged, 20% lose Beta(1,3)": (*_sparse(0.20, 1.0), True),
    "sparse: 90% unchanged, of 10% 80% lose, 20% gain": (*_sparse(0.10, 0.8), True),
    "sparse: 80% unchanged, of 20% half lose, half gain": (*_sparse(0.20, 0.5), True),
    "bits/byte-like: N(0.05, 0.02) per document": (lambda rng, shape: rng.normal(0.05, 0.02, shape), 0.05, False),
}


def _gate_graded(d: np.ndarray, bounded: bool) -> tuple[np.ndarray, np.ndarray]:
    """The gate's interval per row: the t with the Bernoulli-bounded far end for scores within [0, 1]."""
    if not bounded:
        return _t(d)
    ends = np.array([bounded_t_interval(row, CONFIDENCE)[:2] for row in d])
    return ends[:, 0], ends[:, 1]


def graded_section(sims: int, rng) -> list[str]:
    lines = [f"3a. graded scores, paired difference ({sims} simulated pairs of runs): coverage / mean width; "
             "'changed': expected items that change. The gate's interval is the paired t, with the end away "
             "from 0 at least the changed items' Bernoulli bound for scores within [0, 1] (evals/stats.py)",
             f"{'differences':<62}{'n':>5}{'changed':>8}  {'paired t':>14}  {'gate':>14}  {'percentile bootstrap':>20}"]
    for name, (draw, truth, bounded) in GRADED.items():
        if truth is None:
            truth = float(draw(np.random.default_rng(1), 4_000_000).mean())
        changed = np.mean(draw(np.random.default_rng(2), 100_000) != 0)
        for n in (30, 100, 500):
            d = draw(rng, (sims, n))
            cells = []
            for low, high in (_t(d), _gate_graded(d, bounded), _percentile_bootstrap(d, 1000, rng)):
                cells.append(f"{np.mean((low <= truth) & (truth <= high)):.3f} / {np.mean(high - low):.3f}")
            lines.append(f"{name:<62}{n:>5}{changed * n:>8.0f}  {cells[0]:>14}  {cells[1]:>14}  {cells[2]:>20}")
    return lines


def grouped_section(sims: int, rng) -> list[str]:
    """0/1 items in groups whose rates of lost and gained items vary by group (Beta, mean 0.12 and 0.08,
    concentration 2): items of a group flip together more often than items of different groups."""
    lines = [f"3b. grouped 0/1 items, paired difference ({sims} simulated pairs of runs; group rates of lost/gained "
             "items Beta with means 0.12/0.08, concentration 2): coverage / mean width",
             f"{'groups':>6} {'items per group':>16}  {'cluster t':>18}  {'gate':>18}  "
             f"{'percentile cluster bootstrap':>29}"]
    for groups in (5, 10, 25, 50):
        for unequal in (False, True):
            sizes = rng.integers(2, 19, size=(sims, groups)) if unequal else np.full((sims, groups), 10)
            p_lost = rng.beta(0.12 * 2, 0.88 * 2, size=(sims, groups))
            p_gained = rng.beta(0.08 * 2, 0.92 * 2, size=(sims, groups)) * (1 - p_lost)
            lost = rng.binomial(sizes, p_lost)
            gained = rng.binomial(sizes - lost, p_gained / np.maximum(1 - p_lost, 1e-12))
            sums, total = (gained - lost).astype(float), sizes.sum(axis=1)
            mean = sums.sum(axis=1) / total
            se = np.sqrt(groups / (groups - 1) * ((sums - mean[:, None] * sizes) ** 2).sum(axis=1)) / total
            half = stdtrit(groups - 1, 0.975) * se
            picks = rng.integers(0, groups, size=(1000, groups))
            boot = np.array([np.quantile(sums[i][picks].sum(1) / sizes[i][picks].sum(1), [0.025, 0.975])
                             for i in range(sims)])
            # the true mean difference per item: E[p_gained] - E[p_lost], E[p_gained] = 0.08 * (1 - 0.12)
            t_true = 0.08 * 0.88 - 0.12
            # the gate: the cluster t, never narrower than the items' own interval (Tango's, 0 by exact McNemar)
            flat_low, flat_high = paired_binary_interval(lost.sum(axis=1), gained.sum(axis=1), total, CONFIDENCE)
            g_low, g_high = np.minimum(mean - half, flat_low), np.maximum(mean + half, flat_high)
            cells = [f"{np.mean((mean - half <= t_true) & (t_true <= mean + half)):.3f} / {np.mean(2 * half):.3f}",
                     f"{np.mean((g_low <= t_true) & (t_true <= g_high)):.3f} / {np.mean(g_high - g_low):.3f}",
                     f"{np.mean((boot[:, 0] <= t_true) & (t_true <= boot[:, 1])):.3f} / "
                     f"{np.mean(boot[:, 1] - boot[:, 0]):.3f}"]
            lines.append(f"{groups:>6} {'2-18' if unequal else '10':>16}  {cells[0]:>18}  {cells[1]:>18}  "
                         f"{cells[2]:>29}")
    return lines


def ratio_section(sims: int, rng) -> list[str]:
    """Throughput from k repeated runs per side, log tokens/s normal around the true level."""
    lines = [f"4. throughput ratio from repeated runs ({sims * 10} simulated pairs of sides): coverage / mean width "
             "of the ratio's interval",
             f"{'runs per side':>13} {'run-to-run sd (log) base/cand':>30}  {'Welch t (gate)':>16}  {'pooled t':>16}"]
    for k in (2, 3, 5):
        for sd_b, sd_c in ((0.03, 0.03), (0.02, 0.06)):
            lb = rng.normal(np.log(100), sd_b, (sims * 10, k))
            lc = rng.normal(np.log(90), sd_c, (sims * 10, k))
            truth = 0.9
            vb, vc = lb.var(axis=1, ddof=1) / k, lc.var(axis=1, ddof=1) / k
            diff = lc.mean(axis=1) - lb.mean(axis=1)
            df = (vb + vc) ** 2 / (vb ** 2 / (k - 1) + vc ** 2 / (k - 1))
            welch = stdtrit(df, 0.975) * np.sqrt(vb + vc)
            pooled = stdtrit(2 * k - 2, 0.975) * np.sqrt(vb + vc)   # equal runs per side: the same se, 2k - 2 df
            cells = []
            for half in (welch, pooled):
                low, high = np.exp(diff - half), np.exp(diff + half)
                cells.append(f"{np.mean((low <= truth) & (truth <= high)):.3f} / {np.mean(high - low):.3f}")
            lines.append(f"{k:>13} {f'{sd_b}/{sd_c}':>30}  {cells[0]:>16}  {cells[1]:>16}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=4000)
    ap.add_argument("--full", action="store_true", help="print every cell of the 0/1 grid")
    ap.add_argument("--only", choices=("binary", "fine", "items", "graded", "grouped", "ratio"),
                    help="that section alone")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    sections = {"binary": lambda: binary_section(args.full, args.sims, rng), "fine": fine_section,
                "items": lambda: items_section(args.sims // 2, rng),
                "graded": lambda: graded_section(args.sims // 2, rng),
                "grouped": lambda: grouped_section(args.sims // 2, rng), "ratio": lambda: ratio_section(args.sims, rng)}
    for name, section in sections.items():
        if args.only in (None, name):
            print("\n".join(section()) + "\n", flush=True)
    print(f"\n({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
