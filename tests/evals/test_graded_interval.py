"""The paired interval for graded scores within [0, 1]: coverage where few items change (seeded simulation),
the t interval wherever every item changes, and the interval agreeing with its test about 0."""

import math

import numpy as np
import pytest
from scipy.stats import t

from evals.paired_binary import tango_interval
from evals.stats import bounded_t_interval, paired_difference
from reports.gate_rules import INCONCLUSIVE, PASS, REGRESSION, decide

SPARSE_ONE_SIDED = [(60, 0.20), (100, 0.10), (200, 0.05)]   # (items, share that loses): 10-12 changed items


def _sparse_pairs(rng, n: int, rate: float):
    """Baseline scores in [0, 1]; a share `rate` of items lose a Beta(1, 3) amount (mean 0.25)."""
    base = rng.uniform(0.4, 1.0, n)
    loss = np.where(rng.random(n) < rate, np.minimum(rng.beta(1, 3, n), base), 0.0)
    return base, base - loss


def _plain_t(d: np.ndarray):
    half = t.ppf(0.975, d.size - 1) * d.std(ddof=1) / math.sqrt(d.size)
    return d.mean() - half, d.mean() + half


def _coverages(sims: int = 1000):
    rng = np.random.default_rng(0)
    old, new = [], []
    for n, rate in SPARSE_ONE_SIDED:
        # the true mean loss, minimum(Beta(1,3), base) with base ~ U(0.4, 1): by a large seeded sample
        truth = -rate * float(np.minimum(rng.beta(1, 3, 2_000_000), rng.uniform(0.4, 1.0, 2_000_000)).mean())
        hits_old = hits_new = 0
        for _ in range(sims):
            base, cand = _sparse_pairs(rng, n, rate)
            low, high = _plain_t(cand - base)
            hits_old += low <= truth <= high
            low, high = paired_difference(base.tolist(), cand.tolist())["ci95"]
            hits_new += low <= truth <= high
        old.append(hits_old / sims)
        new.append(hits_new / sims)
    return old, new


def test_sparse_one_sided_changes_are_covered_where_the_t_is_not():
    old, new = _coverages()
    assert max(old) < 0.93                                    # the plain t: 0.904-0.924 on these cells
    assert all(0.94 <= c <= 0.97 for c in new)                # 0.957-0.967


def test_every_item_changed_is_the_t_interval():
    rng = np.random.default_rng(1)
    base = rng.beta(2, 2, 200)
    cand = np.clip(base + rng.normal(-0.02, 0.1, 200), 0, 1)
    d = cand - base
    assert np.count_nonzero(d) == d.size
    s = paired_difference(base.tolist(), cand.tolist())
    assert s["ci95"] == pytest.approx(list(_plain_t(d)), rel=1e-12)
    assert s["p"] == pytest.approx(2 * t.sf(abs(d.mean()) / (d.std(ddof=1) / math.sqrt(200)), 199), rel=1e-9)


def test_the_end_towards_zero_is_the_t_and_the_far_end_reaches_further():
    base, cand = [0.5] * 95 + [0.9] * 5, [0.5] * 100
    s = paired_difference(base, cand)
    low, high = _plain_t(np.asarray(cand) - np.asarray(base))
    assert s["ci95"][1] == pytest.approx(high) and s["ci95"][0] < low - 0.005


def test_no_change_on_scores_in_0_1_is_not_a_point():
    """Nothing changed on 100 items: about as wide as Tango's interval for 0/1 scores with no flip."""
    low, high, p, sd = bounded_t_interval(np.zeros(100), 0.95)
    tango_low, tango_high = tango_interval(0, 0, 100)
    assert p == 1.0 and low == -high and high == pytest.approx(float(tango_high), rel=0.1)


def test_few_changes_size_items_needed_from_the_far_ends_spread():
    """No item changed in 100: a margin of 0.01 is not decided, and the items that would decide it come from
    the spread the interval allows (about that of a 4% change rate), not from a spread of 0."""
    s = paired_difference([0.5] * 100, [0.5] * 100)
    verdict = decide("non-inferiority", 0.0, -s["ci95"][1], -s["ci95"][0], 100, 0.01, 1, 0.95, s["test"], s["p"],
                     s["sd"])
    assert verdict.outcome == INCONCLUSIVE and s["sd"] == pytest.approx(0.19, abs=0.01)
    assert 2000 < verdict.items_needed < 3000


@pytest.mark.parametrize("base, cand, higher_is_better", [
    ([5.0, 7.5, 10.0, 2.5, 5.0, 5.0], [5.0, 5.0, 10.0, 0.0, 5.0, 5.0], True),        # not within [0, 1]
    ([0.5, 0.75, 1.0, 0.25, 0.5, 0.5], [0.5, 0.5, 1.0, 0.0, 0.5, 0.5], False),       # lower is better: bits/byte
])
def test_other_graded_scores_keep_the_t_interval(base, cand, higher_is_better):
    d = np.asarray(cand) - np.asarray(base)
    s = paired_difference(base, cand, higher_is_better=higher_is_better)
    ends = _plain_t(d if higher_is_better else -d)
    assert s["test"] == "paired t" and s["ci95"] == pytest.approx(list(ends))


def test_interval_excludes_zero_exactly_when_the_t_test_rejects_and_verdicts_follow_its_ends():
    rng = np.random.default_rng(2)
    for _ in range(300):
        n, rate = int(rng.integers(20, 300)), float(rng.choice([0.02, 0.05, 0.1, 0.3]))
        base, cand = _sparse_pairs(rng, n, rate)
        cand = np.where(rng.random(n) < rate / 3, np.minimum(base + 0.2, 1.0), cand)   # some items gain
        s = paired_difference(base.tolist(), cand.tolist())
        low, high = s["ci95"]
        assert (low > 0 or high < 0) == (s["p"] < 0.05)
        drop, drop_low, drop_high = -s["diff"], -high, -low
        edge = decide("non-inferiority", drop, drop_low, drop_high, n, drop_high, 1, 0.95, s["test"], s["p"], s["sd"])
        below = decide("non-inferiority", drop, drop_low, drop_high, n, drop_high - 1e-9, 1, 0.95)
        assert edge.outcome == PASS and below.outcome in (INCONCLUSIVE, REGRESSION)
