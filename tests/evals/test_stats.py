"""Paired statistics and the gate rules, as pure functions."""

import random

import numpy as np
import pytest

from evals.stats import mcnemar_exact, paired_difference, unpaired_difference
from reports.gate_rules import INCONCLUSIVE, PASS, REGRESSION, decide, items_to_resolve


def test_mcnemar_exact_values():
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(5, 0) == pytest.approx(2 / 32)
    assert mcnemar_exact(3, 3) == 1.0
    assert mcnemar_exact(10, 1) == pytest.approx(2 * 12 / 2048)


def test_paired_counts_flips_and_is_narrower_than_unpaired():
    rng = random.Random(0)
    base = [float(rng.random() < 0.8) for _ in range(400)]
    cand = [b if rng.random() < 0.95 else 1.0 - b for b in base]   # 5% of items flip either way
    p, u = paired_difference(base, cand), unpaired_difference(base, cand)
    assert p["lost"] == sum(b > c for b, c in zip(base, cand))
    assert p["gained"] == sum(c > b for b, c in zip(base, cand))
    assert p["diff"] == pytest.approx(u["diff"])
    assert (p["ci95"][1] - p["ci95"][0]) < 0.5 * (u["ci95"][1] - u["ci95"][0])


def test_paired_interval_with_no_flips_is_narrow_but_not_degenerate():
    p = paired_difference([1.0] * 100 + [0.0] * 100, [1.0] * 100 + [0.0] * 100)
    assert p["diff"] == 0 and p["mcnemar_p"] == 1.0
    assert p["ci95"][0] < 0 < p["ci95"][1] and p["ci95"][1] < 0.03


def test_graded_scores_use_a_normal_interval_and_no_mcnemar():
    p = paired_difference([0.5, 0.75, 1.0, 0.25], [0.5, 0.5, 1.0, 0.25])
    assert p["mcnemar_p"] is None and p["lost"] == 1 and p["diff"] == pytest.approx(-0.0625)


def test_mismatched_items_are_an_error():
    with pytest.raises(ValueError):
        paired_difference([1.0, 0.0], [1.0])


@pytest.mark.parametrize("rule,drop,low,high,expected", [
    ("point", 0.06, 0.0, 0.12, REGRESSION),
    ("point", 0.04, 0.03, 0.05, PASS),
    ("significant", 0.06, 0.01, 0.11, REGRESSION),     # beyond the margin and significant
    ("significant", 0.06, -0.01, 0.13, INCONCLUSIVE),  # beyond the margin, not significant
    ("significant", 0.04, 0.03, 0.05, PASS),           # significant but within the margin
    ("non-inferiority", 0.01, -0.01, 0.03, PASS),
    ("non-inferiority", 0.08, 0.06, 0.10, REGRESSION),
    ("non-inferiority", 0.03, 0.00, 0.07, INCONCLUSIVE),
])
def test_rules(rule, drop, low, high, expected):
    assert decide(rule, drop, low, high, n=200, margin=0.05, min_n=30, confidence=0.95).outcome == expected


def test_too_few_items_is_inconclusive_and_says_how_many():
    verdict = decide("point", 0.5, 0.4, 0.6, n=10, margin=0.05, min_n=30, confidence=0.95)
    assert verdict.outcome == INCONCLUSIVE and verdict.items_needed == 30


def test_inconclusive_estimates_more_items_when_the_gap_is_small():
    verdict = decide("non-inferiority", 0.03, 0.0, 0.07, n=200, margin=0.05, min_n=30, confidence=0.95)
    assert verdict.items_needed > 200
    assert items_to_resolve(0.3, 0.02, 0.95) > items_to_resolve(0.3, 0.04, 0.95)


def test_grouped_items_get_a_wider_cluster_bootstrap_interval():
    from evals.stats import mean_ci

    # 20 groups of 10 items; a group is all right or all wrong (perfectly correlated within groups)
    values = [1.0 if g % 4 else 0.0 for g in range(20) for _ in range(10)]
    groups = [g for g in range(20) for _ in range(10)]
    flat, clustered = mean_ci(values), mean_ci(values, groups)
    assert flat["ci_method"] == "wilson" and clustered["ci_method"] == "cluster-bootstrap"
    assert clustered["groups"] == 20 and clustered["value"] == flat["value"] == 0.75
    width = lambda r: r["ci95"][1] - r["ci95"][0]
    assert width(clustered) > 2.5 * width(flat)        # 200 items carry the information of 20
    # one item per group is no grouping at all
    assert mean_ci(values, list(range(200)))["ci_method"] == "wilson"


def test_cluster_bootstrap_against_scipys_bootstrap_of_group_means():
    """Reference: with equal group sizes and items equal to their group's mean, resampling whole groups is
    scipy's percentile bootstrap of the group means."""
    import numpy as np
    from scipy.stats import bootstrap

    from evals.stats import cluster_bootstrap_mean

    group_means = np.random.default_rng(1).random(30)
    values = [float(m) for m in group_means for _ in range(4)]
    groups = [g for g in range(30) for _ in range(4)]
    low, high = cluster_bootstrap_mean(values, groups, iters=20000)
    ref = bootstrap((group_means,), np.mean, n_resamples=20000, method="percentile", random_state=0).confidence_interval
    assert abs(low - ref.low) < 0.01 and abs(high - ref.high) < 0.01


def test_the_exact_tails_agree_with_scipy_stats():
    """The p-values and interval ends come from scipy.special (its stats module takes a CLI half a second to
    import); they are scipy.stats's numbers."""
    from scipy.stats import binomtest, t

    from evals.stats import _t_interval

    for lost, gained in [(0, 1), (1, 0), (3, 3), (5, 0), (13, 4), (17, 5), (18, 13), (40, 2), (100, 91)]:
        assert mcnemar_exact(lost, gained) == pytest.approx(binomtest(lost, lost + gained, 0.5).pvalue, rel=1e-9)
    assert mcnemar_exact(0, 0) == 1.0
    d = np.array([0.1, -0.3, 0.25, 0.4, 0.05, 0.2])
    se = d.std(ddof=1) / np.sqrt(d.size)
    half = t.ppf(0.975, d.size - 1) * se
    assert _t_interval(d, 0.95) == pytest.approx(
        (d.mean() - half, d.mean() + half, 2 * t.sf(abs(d.mean()) / se, d.size - 1)), rel=1e-9)


def test_paired_cluster_t_is_the_t_interval_of_group_means_for_equal_groups():
    from scipy.stats import t

    rng = np.random.default_rng(3)
    d_groups = rng.normal(-0.05, 0.2, size=8)
    base = [0.5] * 40
    cand = [0.5 + x for x in d_groups for _ in range(5)]
    s = paired_difference(base, cand, groups=[i // 5 for i in range(40)])
    se = d_groups.std(ddof=1) / np.sqrt(8)
    half = t.ppf(0.975, 7) * se
    assert s["test"] == "paired cluster t" and s["groups"] == 8
    assert s["ci95"] == pytest.approx([d_groups.mean() - half, d_groups.mean() + half], rel=1e-9)
    assert s["p"] == pytest.approx(2 * t.sf(abs(d_groups.mean()) / se, 7), rel=1e-9)


def test_paired_cluster_t_covers_with_five_groups():
    """5 groups of 10 items whose rates of lost and gained items vary by group (seeded): a percentile bootstrap
    of the groups covers about 80% of the time; the cluster t close to 95%."""
    rng = np.random.default_rng(0)
    covered = 0
    for _ in range(400):
        p_lost, p_gained = rng.beta(0.24, 1.76, 5), rng.beta(0.16, 1.84, 5)
        base, cand = [], []
        for pl, pg in zip(p_lost, p_gained):
            u = rng.random(10)
            base += [1.0 if x < pl else 0.0 for x in u]
            cand += [1.0 if pl <= x < pl + pg * (1 - pl) else 0.0 for x in u]
        low, high = paired_difference(base, cand, groups=[i // 10 for i in range(50)])["ci95"]
        covered += low <= 0.16 / 2 * (1 - 0.12) - 0.12 <= high
    assert covered / 400 >= 0.92
