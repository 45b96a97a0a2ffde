"""The gate decides on the evidence it shows: one set of paired items, grouped items resampled as groups,
a policy from the right place, metrics pointing the right way, and a test named beside every "significant"."""

import json
import math

import numpy as np
import pytest

from evals.stats import mean_ci, paired_difference
from reports.gate_rules import PASS, decide
from tests.fixtures import edit_results, variant, write_items, write_run
from tests.helpers import quant


def scored(run, name, task, scores, **entry):
    path = run / "variants" / name / "evals" / f"{task}.jsonl"
    write_items(run, name, task, scores, metric=entry.get("metric", "exact_match"))
    return path


@pytest.fixture
def limited_run(tmp_path):
    """The issue's example: baseline scored 250 items, candidate only the first 100 (a changed `limit`), and
    lost 10 of those 100 while gaining none; the whole-run means agree (0.700), the shared items do not."""
    base = [1.0] * 80 + [0.0] * 20 + [1.0] * 95 + [0.0] * 55          # 175/250 = 0.700; 80/100 on the first 100
    cand = [0.0] * 10 + [1.0] * 70 + [0.0] * 20                        # 70/100 = 0.700
    run = write_run(tmp_path / "run", {"bf16": variant({"math": 0.7}), "short": variant({"math": 0.7})})
    for name, scores in (("bf16", base), ("short", cand)):
        edit_results(run, lambda r: r["variants"][name]["accuracy"]["math"].update(n=len(scores)))
        write_items(run, name, "math", scores)
    return run


def test_different_item_sets_are_refused_unless_allowed(limited_run):
    code, out = quant("gate", "--baseline", str(limited_run), "--candidate", f"{limited_run}:short")
    assert code == 2, out
    assert "baseline 250, candidate 100, 100 in common" in out and "--allow-partial-overlap" in out
    assert "Traceback" not in out


@pytest.mark.parametrize("rule", ["point", "significant"])
def test_issue_example_is_a_regression_on_the_shared_items(limited_run, tmp_path, rule):
    code, out = quant("gate", "--baseline", str(limited_run), "--candidate", f"{limited_run}:short", "--rule", rule,
                      "--allow-partial-overlap", "--json", str(tmp_path / "g.json"), "--junit", str(tmp_path / "j.xml"))
    assert code == 1, out
    assert "+0.100" in out and "100 of 250/100" in out and "partial overlap" in out
    check = json.loads((tmp_path / "g.json").read_text())["checks"][0]
    assert (check["n_baseline"], check["n_candidate"], check["n_paired"]) == (250, 100, 100)
    assert check["baseline"] == pytest.approx(0.8) and check["candidate"] == pytest.approx(0.7)
    assert check["drop"] == pytest.approx(0.1) and check["drop_ci"][0] > 0 and check["partial_overlap"]
    junit = (tmp_path / "j.xml").read_text()
    assert '<property name="n_paired" value="100"/>' in junit and '"n_baseline" value="250"' in junit
    if rule == "significant":
        assert "exact McNemar p=0.00195" in out


def test_point_rule_without_item_files_uses_means_only_for_equal_n(tmp_path):
    run = write_run(tmp_path / "run", {"bf16": variant({"math": 0.9}), "q": variant({"math": 0.89})})
    code, out = quant("gate", "--baseline", str(run), "--candidate", f"{run}:q")
    assert code == 0 and "whole-run means of 200 items each" in out, out
    edit_results(run, lambda r: r["variants"]["q"]["accuracy"]["math"].update(n=100))
    code, out = quant("gate", "--baseline", str(run), "--candidate", f"{run}:q")
    assert code == 2 and "different numbers of items (200 vs 100)" in out, out


def grouped(scores_per_group: list[float], size: int = 10) -> list[float]:
    return [s for s in scores_per_group for _ in range(size)]


def test_grouped_items_are_resampled_as_groups(tmp_path):
    """25 groups of 10 items flipping together: the candidate loses 3 groups and gains 1. Counted as 250
    independent items that is significant (McNemar p=0.002); as 25 groups it is not."""
    base_groups = [1.0] * 15 + [0.0] * 10
    cand_groups = [0.0] * 3 + [1.0] * 12 + [1.0] + [0.0] * 9
    run = write_run(tmp_path / "run", {"bf16": variant({"math": 0.6}), "q": variant({"math": 0.52})})
    for name, groups in (("bf16", base_groups), ("q", cand_groups)):
        path = run / "variants" / name / "evals" / "math.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps({"doc_id": i, "prompt": f"q{i}", "group": f"g{i // 10}",
                                            "metrics": {"exact_match": s}}) + "\n"
                                for i, s in enumerate(grouped(groups))))
    code, out = quant("gate", "--baseline", str(run), "--candidate", f"{run}:q", "--rule", "significant")
    assert code == 3, out
    assert "paired cluster t" in out and "not significant" in out


def test_paired_cluster_interval_is_wider_and_flat_one_is_not():
    base, cand = grouped([1.0] * 15 + [0.0] * 10), grouped([0.0] * 3 + [1.0] * 13 + [0.0] * 9)
    groups = [i // 10 for i in range(250)]
    flat, clustered = paired_difference(base, cand), paired_difference(base, cand, groups)
    assert flat["test"] == "exact McNemar" and clustered["test"] == "paired cluster t"
    assert clustered["groups"] == 25 and flat["ci95"][1] < 0 < clustered["ci95"][1]


def test_bootstrap_memory_is_bounded_for_many_items():
    import tracemalloc

    values = np.random.default_rng(0).random(100_000).tolist()   # graded scores: a bootstrap interval
    tracemalloc.start()
    result = mean_ci(values)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert result["ci_method"] == "bootstrap" and result["ci95"][0] < 0.5 < result["ci95"][1]
    assert peak < 64 * 2**20        # 2000 x 100k int64 indices at once would be 1.6 GB


def test_significant_never_beside_p_above_alpha():
    """Over every flip count, the interval excludes 0 exactly when the named test's p < 0.05."""
    for n in (30, 100, 400):
        for lost in range(0, 25):
            for gained in range(0, 25):
                if lost + gained > n:
                    continue
                base = [1.0] * lost + [0.0] * gained + [1.0] * (n - lost - gained)
                cand = [0.0] * lost + [1.0] * gained + [1.0] * (n - lost - gained)
                s = paired_difference(base, cand)
                drop, low, high = -s["diff"], -s["ci95"][1], -s["ci95"][0]
                assert (low > 0 or high < 0) == (s["p"] < 0.05), (n, lost, gained, s)
                reason = decide("significant", drop, low, high, n, 0.0, 1, 0.95, s["test"], s["p"]).reason
                if "and significant" in reason:
                    assert s["p"] < 0.05 and f"exact McNemar p={s['p']:.3g}" in reason


def test_graded_scores_use_a_t_interval():
    from scipy.stats import t

    base, cand = [5.0, 7.5, 10.0, 2.5, 5.0], [5.0, 5.0, 10.0, 0.0, 2.5]   # graded, not within [0, 1]
    s = paired_difference(base, cand)
    d = np.asarray(cand) - np.asarray(base)
    half = t.ppf(0.975, 4) * d.std(ddof=1) / math.sqrt(5)
    assert s["test"] == "paired t" and s["ci95"] == pytest.approx([d.mean() - half, d.mean() + half])


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_non_finite_is_never_a_pass(value):
    assert decide("point", value, value, value, 200, 0.05, 30, 0.95).outcome != PASS
    assert decide("non-inferiority", 0.0, -0.01, value, 200, 0.05, 30, 0.95).outcome != PASS


def two_runs(tmp_path, base_gates, cand_gates, base=0.90, cand=0.89):
    a = write_run(tmp_path / "a", {"bf16": variant({"math": base})}, gates=base_gates)
    b = write_run(tmp_path / "b", {"bf16": variant({"math": base}), "q": variant({"math": cand})}, gates=cand_gates)
    return a, b


def test_policy_comes_from_the_baseline_not_the_candidate(tmp_path):
    a, b = two_runs(tmp_path, {"max_drop": 0.005}, {"max_drop": 0.5})
    code, out = quant("gate", "--baseline", str(a), "--candidate", f"{b}:q")
    assert code == 1, out
    assert f"policy: baseline recipe {a / 'results.json'}" in out
    policy = tmp_path / "gate-policy.yaml"
    policy.write_text("max_drop: 0.05\n")
    code, out = quant("gate", "--baseline", str(a), "--candidate", f"{b}:q", "--policy", str(policy))
    assert code == 0 and f"policy: {policy}" in out, out


@pytest.mark.parametrize("policy,message", [
    ("per_task: {mth: 0.001}", "per_task 'mth' names no task in the run; did you mean 'math'?"),
    ("per_task: {math: 1.5}", "per_task.math"),
    ("per_task: {math: .nan}", "per_task.math"),
    ("max_drop: .inf", "max_drop"),
])
def test_policy_mistakes_are_errors(run_pair, tmp_path, policy, message):
    path = tmp_path / "p.yaml"
    path.write_text(policy + "\n")
    code, out = quant("gate", "--baseline", str(run_pair), "--candidate", f"{run_pair}:q", "--policy", str(path))
    assert code == 2 and message in out and "Traceback" not in out, out


@pytest.fixture
def run_pair(tmp_path):
    return write_run(tmp_path / "run", {"bf16": variant({"math": 0.9}), "q": variant({"math": 0.89})})


def test_lower_is_better_metric_counts_an_increase_as_the_drop(tmp_path):
    run = write_run(tmp_path / "run", {"bf16": variant({"edit": 0.1}), "q": variant({"edit": 0.3})},
                    gates={"max_drop": 0.05})
    edit_results(run, lambda r: [v["accuracy"]["edit"].update(metric="edit_distance", higher_is_better=False)
                                 for v in r["variants"].values()])
    code, out = quant("gate", "--baseline", str(run), "--candidate", f"{run}:q")
    assert code == 1 and "+0.200" in out, out


def test_metrics_that_are_not_a_mean_of_items_are_refused(tmp_path):
    run = write_run(tmp_path / "run", {"bf16": variant({"mt": 0.30}), "q": variant({"mt": 0.29})},
                    gates={"max_drop": 0.05})
    edit_results(run, lambda r: [v["accuracy"]["mt"].update(metric="bleu") for v in r["variants"].values()])
    code, out = quant("gate", "--baseline", str(run), "--candidate", f"{run}:q")
    assert code == 2 and "'bleu' is not a mean of per-item scores" in out, out


def test_reported_value_must_be_the_mean_of_the_items(tmp_path):
    run = write_run(tmp_path / "run", {"bf16": variant({"math": 0.9}), "q": variant({"math": 0.9})})
    write_items(run, "bf16", "math", [1.0] * 90 + [0.0] * 10)
    write_items(run, "q", "math", [1.0] * 50 + [0.0] * 50)      # reported 0.9, items say 0.5
    code, out = quant("gate", "--baseline", str(run), "--candidate", f"{run}:q")
    assert code == 2 and "is not the mean of its 100 per-item values (0.5)" in out, out
