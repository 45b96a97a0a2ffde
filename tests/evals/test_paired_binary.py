"""The 0/1 paired interval: its coverage on a fixed-seed grid, the verdict at the margin's edge, no flips and
all flips."""

import numpy as np
import pytest

from evals.paired_binary import mcnemar_exact, paired_binary_interval, tango_interval, tango_z
from evals.stats import paired_difference
from reports.gate_rules import INCONCLUSIVE, PASS, REGRESSION, decide

Z = 1.959963984540054


def _items(n: int, lost: int, gained: int) -> tuple[list[float], list[float]]:
    same = n - lost - gained
    return [1.0] * lost + [0.0] * gained + [1.0] * same, [0.0] * lost + [1.0] * gained + [1.0] * same


def _coverage(interval, n, p_lost, p_gained, rng, sims=20000):
    lost = rng.binomial(n, p_lost, sims)
    gained = rng.binomial(n - lost, p_gained / (1 - p_lost))
    low, high = interval(lost, gained, n)
    truth = p_gained - p_lost
    return np.mean((low <= truth + 1e-12) & (truth - 1e-12 <= high)), np.mean(high - low)


@pytest.mark.parametrize("n,p_lost,p_gained", [
    (132, 0.15, 0.10), (100, 0.03, 0.01), (500, 0.08, 0.05), (30, 0.3, 0.1), (50, 0.12, 0.04),
    (200, 0.16, 0.04), (1000, 0.1, 0.05), (2000, 0.02, 0.01),
])
def test_coverage_of_a_true_difference_is_95_percent(n, p_lost, p_gained):
    """20,000 simulated tables per cell (seeded): within 0.94..0.965 up to the simulation's own error."""
    cov, width = _coverage(paired_binary_interval, n, p_lost, p_gained, np.random.default_rng(n))
    assert 0.935 <= cov <= 0.97, (cov, width)


@pytest.mark.parametrize("n,p_flip", [(132, 0.05), (200, 0.12), (500, 0.04)])
def test_coverage_of_no_difference(n, p_flip):
    """Where nothing changed on average, Tango's interval covers 95%; the gate's, which reaches 0 wherever
    exact McNemar does not reject, covers as often as that test is right: more, never less."""
    rng = np.random.default_rng(n)
    tango, _ = _coverage(tango_interval, n, p_flip, p_flip, rng)
    gate, _ = _coverage(paired_binary_interval, n, p_flip, p_flip, np.random.default_rng(n))
    assert 0.935 <= tango <= 0.97 and tango <= gate <= 0.985


def test_narrower_than_the_product_of_clopper_pearson_intervals():
    """SmolLM2's humaneval_mc, W4A16 RTN: 20 of 132 items lost, 13 gained (the product gave -0.052..+0.180)."""
    s = paired_difference(*_items(132, 20, 13))
    drop_low, drop_high = -s["ci95"][1], -s["ci95"][0]
    assert drop_low == pytest.approx(-0.0335, abs=5e-4) and drop_high == pytest.approx(0.1406, abs=5e-4)
    assert s["test"] == "exact McNemar" and s["interval"] == "Tango score"


@pytest.mark.parametrize("lost,gained,n", [(12, 8, 100), (6, 2, 100), (20, 13, 132), (3, 0, 50), (0, 0, 200),
                                           (40, 25, 1000)])
def test_the_verdict_is_the_score_test_at_the_margins_edge(lost, gained, n):
    """Non-inferiority passes exactly when Tango's one-sided test rejects "the drop is at least the margin",
    and calls a regression exactly when it rejects "the drop is at most the margin": a margin a hair either
    side of the printed end decides each way, and the test agrees."""
    s = paired_difference(*_items(n, lost, gained))
    drop, low, high = -s["diff"], -s["ci95"][1], -s["ci95"][0]
    if s["p"] >= 0.05:   # where the interval reaches 0 for exact McNemar, its ends are Tango's
        assert [low, high] == pytest.approx([min(e, 0) if i == 0 else max(e, 0) for i, e in
                                             enumerate(-float(x) for x in tango_interval(lost, gained, n)[::-1])])

    def outcome(margin):
        return decide("non-inferiority", drop, low, high, n, margin, 1, 0.95, s["test"], s["p"], s["sd"]).outcome

    # "the drop is at least m" is "the difference is at most -m": rejected when Z(-m) >= z
    for eps in (1e-9, 1e-6):
        if high > 0:
            assert outcome(high + eps) == PASS and tango_z(lost, gained, n, -(high + eps)) >= Z
            assert outcome(high - eps) != PASS and tango_z(lost, gained, n, -(high - eps)) < Z
        if low > 0:
            assert outcome(low - eps) == REGRESSION and tango_z(lost, gained, n, -(low - eps)) <= -Z
            assert outcome(low + eps) == INCONCLUSIVE and tango_z(lost, gained, n, -(low + eps)) > -Z
    assert outcome(high) == PASS   # the printed end itself passes, as "drop <= margin" says


def test_the_interval_excludes_zero_exactly_when_exact_mcnemar_rejects():
    lost, gained = np.meshgrid(np.arange(60), np.arange(60))
    for confidence in (0.9, 0.95, 0.99, 0.995):
        low, high = paired_binary_interval(lost, gained, 200, confidence)
        assert np.array_equal((low > 0) | (high < 0), mcnemar_exact(lost, gained) < 1 - confidence)


def test_no_flips_leave_the_rule_of_three_width():
    for n in (30, 100, 164, 2000):
        s = paired_difference(*_items(n, 0, 0))
        assert s["ci95"] == pytest.approx([-Z * Z / (n + Z * Z), Z * Z / (n + Z * Z)], rel=1e-9)
        assert s["p"] == 1.0 and s["sd"] == pytest.approx(min(1.0, 3 / n) ** 0.5)
    s = paired_difference(*_items(100, 0, 0))
    assert s["ci95"][1] == pytest.approx(0.0370, abs=1e-4)
    assert decide("non-inferiority", 0.0, -s["ci95"][1], -s["ci95"][0], 100, 0.04, 1, 0.95).outcome == PASS
    assert decide("non-inferiority", 0.0, -s["ci95"][1], -s["ci95"][0], 100, 0.03, 1, 0.95).outcome == INCONCLUSIVE


@pytest.mark.parametrize("lost,gained", [(50, 0), (0, 50), (30, 20), (25, 25)])
def test_all_flips(lost, gained):
    """Every item flipped: the interval stays within [-1, 1] and holds the observed difference."""
    s = paired_difference(*_items(50, lost, gained))
    low, high = s["ci95"]
    assert -1 <= low <= s["diff"] <= high <= 1
    if gained == 0:
        assert low == -1 and high < -0.8 and s["p"] < 1e-10
    if lost == 0:
        assert high == 1 and low > 0.8
    if lost == gained:
        assert low < 0 < high and s["p"] == 1.0


def test_items_needed_decide_about_80_percent_of_reruns():
    """extraction_mc (SmolLM2, W4A16 RTN): 12 of 100 lost, 8 gained, drop 0.04 against a margin of 0.05. At the
    items the gate names, re-runs at those rates are decided about 80% of the time (seeded simulation)."""
    n, lost, gained, margin = 100, 12, 8, 0.05
    s = paired_difference(*_items(n, lost, gained))
    verdict = decide("non-inferiority", -s["diff"], -s["ci95"][1], -s["ci95"][0], n, margin, 1, 0.95, s["test"],
                     s["p"], s["sd"])
    assert verdict.outcome == INCONCLUSIVE and 14_000 < verdict.items_needed < 17_000
    rng, big = np.random.default_rng(0), verdict.items_needed
    sim_lost = rng.binomial(big, lost / n, 4000)
    sim_gained = rng.binomial(big - sim_lost, gained / n / (1 - lost / n))
    low, high = paired_binary_interval(sim_lost, sim_gained, big)
    decided = np.mean((-low <= margin) | (-high > margin))
    assert 0.75 <= decided <= 0.85, decided


def test_the_benchmarks_newcombe_reference_is_newcombes_published_interval():
    """Newcombe (1998) method 10 with his continuity correction to phi, on Fagerland, Lydersen & Laake's
    example (59 both, 6 and 16 discordant, 80 neither): -0.1186..-0.0046 as published."""
    from benchmarks.interval_coverage import newcombe

    low, high = newcombe(np.float64(59), np.float64(16), np.float64(6), np.float64(80))
    assert (round(float(low), 4), round(float(high), 4)) == (-0.1186, -0.0046)


def test_the_smallest_drop_called_a_regression_is_the_gates_own_verdict():
    """benchmarks/detectable_drop.py (docs/deciding.md's table): at 20 items and nothing gained, 6 lost is the
    first drop exact McNemar calls significant (p 0.031; 5 lost: 0.0625), and the gate's `decide` agrees on
    both sides of every row it prints."""
    from benchmarks.detectable_drop import smallest_regression
    assert smallest_regression(20, 0, 0.05) == (6, 0.3)
    for n, gained in ((40, 2), (80, 8), (164, 8)):
        lost, drop = smallest_regression(n, gained, 0.05)
        verdicts = []
        for k in (lost - 1, lost):
            low, high = paired_binary_interval(k, gained, n)
            verdicts.append(decide("significant", (k - gained) / n, -float(high), -float(low), n, 0.05, 0,
                                   0.95, test="exact McNemar", p=mcnemar_exact(k, gained)).outcome)
        assert verdicts[1] == REGRESSION and verdicts[0] != REGRESSION
