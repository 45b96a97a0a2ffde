"""Intervals with no observed spread are never a point: declaring groups, or every item changing alike, never
makes the gate more lenient or more severe than the items taken one by one (the examples are those of an
independent check of the gate's statistics)."""

import math

import numpy as np
import pytest

from evals.paired_binary import mcnemar_exact, paired_binary_interval
from evals.stats import paired_difference
from reports.gate_rules import INCONCLUSIVE, PASS, decide


def _verdict(s: dict, rule: str, margin: float):
    drop, low, high = -s["diff"], -s["ci95"][1], -s["ci95"][0]
    return decide(rule, drop, low, high, s["n"], margin, 1, 0.95, s["test"], s["p"], s["sd"])


def test_two_groups_of_five_with_no_change_are_the_ungrouped_interval():
    """The cluster t alone: [0, 0], and non-inferiority passed at margin 0; ungrouped it is about +-0.28."""
    items = [1.0, 0.0, 1.0, 1.0, 0.0] * 2
    s = paired_difference(items, items, groups=[i // 5 for i in range(10)])
    flat = paired_difference(items, items)
    assert s["ci95"] == pytest.approx(flat["ci95"]) and s["ci95"][1] == pytest.approx(0.278, abs=0.005)
    assert _verdict(s, "non-inferiority", 0.0).outcome == INCONCLUSIVE


def test_three_groups_each_losing_one_item_are_not_a_regression():
    """The cluster t alone: [-0.1, -0.1] with p = 0, a regression under both rules; ungrouped McNemar p = 0.25."""
    base = [1.0] * 30
    cand = [0.0 if i % 10 == 0 else 1.0 for i in range(30)]
    s = paired_difference(base, cand, groups=[i // 10 for i in range(30)])
    assert s["p"] == pytest.approx(mcnemar_exact(3, 0)) == pytest.approx(0.25)
    low, high = paired_binary_interval(3, 0, 30)
    assert s["ci95"][0] <= float(low) < -0.1 and s["ci95"][1] >= float(high) > 0.0
    assert "exact McNemar" in s["test"] and "items ungrouped" in s["test"]
    for rule in ("significant", "non-inferiority"):
        assert _verdict(s, rule, 0.0).outcome == INCONCLUSIVE


def test_three_graded_items_each_dropping_half_are_not_a_regression():
    """A t on three equal changes: the point -0.5 with p = 0; the signs alone say p = 0.25."""
    s = paired_difference([0.5] * 3, [0.0] * 3)
    assert s["p"] == pytest.approx(0.25) and s["ci95"][1] > 0.0 and s["ci95"][0] <= -0.5
    assert _verdict(s, "significant", 0.0).outcome == INCONCLUSIVE


def test_equal_changes_on_unbounded_scores_are_scaled_sign_intervals():
    s = paired_difference([5.0] * 4, [7.0] * 4)          # scores not within [0, 1]: every item +2
    low, high = paired_binary_interval(0, 4, 4)
    assert s["ci95"] == pytest.approx([2 * float(low), 2 * float(high)]) and s["p"] == pytest.approx(0.125)


def test_no_change_on_unbounded_scores_is_inconclusive_saying_why():
    s = paired_difference([0.7, 1.2, 0.9], [0.7, 1.2, 0.9], higher_is_better=False)
    assert s["ci95"] == [-math.inf, math.inf] and "no interval can be estimated" in s["undecidable"]


def test_grouping_never_narrows_the_interval():
    rng = np.random.default_rng(5)
    for _ in range(200):
        n = int(rng.integers(6, 60))
        base = rng.integers(0, 2, n).astype(float)
        cand = np.where(rng.random(n) < 0.2, 1 - base, base)
        groups = rng.integers(0, max(2, n // 4), n).tolist()
        flat, grouped = paired_difference(base.tolist(), cand.tolist()), \
            paired_difference(base.tolist(), cand.tolist(), groups)
        assert grouped["ci95"][0] <= flat["ci95"][0] + 1e-12 and grouped["ci95"][1] >= flat["ci95"][1] - 1e-12
        assert (grouped["ci95"][0] > 0 or grouped["ci95"][1] < 0) == (grouped["p"] < 0.05)


def test_a_wide_margin_still_passes_grouped_items_that_did_not_change():
    items = [1.0, 0.0] * 50
    s = paired_difference(items, items, groups=[i // 10 for i in range(100)])
    assert _verdict(s, "non-inferiority", 0.05).outcome == PASS
