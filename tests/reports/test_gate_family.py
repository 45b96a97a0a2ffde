"""Several checks decided together: Holm over tasks x variants, the family printed, and `--candidate RUN`
gating every variant of a run."""

import pytest

from reports.family import Family, family_confidence, holm_adjusted
from tests.fixtures import variant, write_items, write_run
from tests.helpers import quant, quant_json


BASE = [1.0] * 150 + [0.0] * 50


def _lose(k: int) -> list[float]:
    """The baseline's items with the first k right answers lost (exact McNemar p = 2 * 0.5**k)."""
    return [0.0] * k + BASE[k:]


@pytest.fixture
def run(tmp_path):
    """lose6 loses 6 of 200 items of math (p = 0.031 alone, 0.0625 after Holm over two tasks) and none of
    code; lose12 loses 12 of math (p = 0.00049: a regression either way); same loses nothing."""
    scores = {"bf16": (BASE, BASE), "lose6": (_lose(6), BASE), "lose12": (_lose(12), BASE), "same": (BASE, BASE)}
    run = write_run(tmp_path / "run", {n: variant({"math": sum(m) / 200, "code": sum(c) / 200})
                                       for n, (m, c) in scores.items()}
                    | {"unserved": variant({"math": 0.75, "code": 0.75}, status="unsupported")},
                    gates={"rule": "significant", "max_drop": 0.02})
    for name, (math, code) in scores.items():
        write_items(run, name, "math", math)
        write_items(run, name, "code", code)
    return run


def _policy(tmp_path, text):
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    return str(path)


def test_holm_turns_a_regression_significant_alone_into_inconclusive(run, tmp_path):
    alone = _policy(tmp_path, "rule: significant\nmax_drop: 0.02\ncorrection: none\n")
    code, out = quant("gate", "--baseline", str(run), "--candidate", f"{run}:lose6", "--policy", alone)
    assert code == 1, out
    assert "family: 2 tasks x 1 variant = 2 accuracy checks; alpha 0.05 per check, uncorrected" in out
    code, report = quant_json("gate", "--baseline", str(run), "--candidate", f"{run}:lose6")
    assert code == 3, report
    assert report["family"] == {"tasks": ["math", "code"], "variants": ["lose6"], "size": 2, "rule": "significant",
                                "alpha": 0.05, "method": "Holm"}
    math = report["checks"][0]
    assert math["outcome"] == "inconclusive" and math["p"] == pytest.approx(0.03125)
    assert math["p_family"] == pytest.approx(0.0625) and "Holm-adjusted p=0.0625 >= 0.05 over 2 checks" in math["reason"]


def test_the_family_is_printed_and_a_clear_drop_stays_a_regression(run):
    code, out = quant("gate", "--baseline", str(run), "--candidate", f"{run}:lose12")
    assert code == 1, out
    assert "family: 2 tasks x 1 variant = 2 accuracy checks; family-wise alpha 0.05, Holm" in out
    assert "-12/+0 p=0.000488 (Holm 0.000977)" in out


def test_candidate_run_gates_every_variant_as_one_family(run, tmp_path):
    md, xml = tmp_path / "gate.md", tmp_path / "gate.xml"
    code, out = quant("gate", "--baseline", str(run), "--candidate", str(run), "--markdown", str(md),
                      "--junit", str(xml))
    assert code == 1, out   # the worst over the variants: lose12 regresses
    assert "family: 2 tasks x 3 variants = 6 accuracy checks; family-wise alpha 0.05, Holm" in out
    assert out.count("gate: ") == 3 and "gate: bf16 vs" not in out
    assert "not gated: candidate unserved is unsupported" in out
    assert "every variant: REGRESSION (lose6 inconclusive, lose12 regression, same pass)" in out
    assert "6 accuracy checks" in md.read_text() and xml.read_text().count("<testsuite ") == 3
    code, report = quant_json("gate", "--baseline", str(run), "--candidate", str(run))
    assert [g["candidate"] for g in report["candidates"]] == ["lose6", "lose12", "same"]
    assert report["outcome"] == "regression" and list(report["not_gated"]) == ["unserved"]


def test_the_rule_point_has_no_test_to_correct(run):
    code, out = quant("gate", "--baseline", str(run), "--candidate", f"{run}:lose6", "--rule", "point")
    assert code == 1 and "rule point has no test: no family-wise correction" in out


def test_holm_adjusted_values():
    assert holm_adjusted([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.09, 0.09, 0.5])
    assert holm_adjusted([0.6, 0.6]) == [1.0, 1.0]


def test_non_inferiority_regressions_are_called_on_the_bonferroni_interval():
    assert family_confidence("non-inferiority", 0.95, 5, "holm") == pytest.approx(0.99)
    assert family_confidence("non-inferiority", 0.95, 5, "none") is None
    assert family_confidence("significant", 0.95, 5, "holm") is None
    assert Family(["a"], ["v"], "non-inferiority", 0.05, "holm").method is None   # one check: nothing to correct
    assert Family(["a", "b"], ["v"], "non-inferiority", 0.05, "holm").method == "Bonferroni"


def test_non_inferiority_calls_a_regression_on_the_bonferroni_interval(tmp_path):
    """9 of 200 items lost: the 95% lower bound (+0.024) is beyond the 0.02 margin, the 97.5% one (+0.019),
    which two tasks call for, is not."""
    scores = {"bf16": (BASE, BASE), "lose9": (_lose(9), BASE)}
    run = write_run(tmp_path / "run", {n: variant({"math": sum(m) / 200, "code": sum(c) / 200})
                                       for n, (m, c) in scores.items()})
    for name, (math, code) in scores.items():
        write_items(run, name, "math", math)
        write_items(run, name, "code", code)
    alone = _policy(tmp_path, "rule: non-inferiority\nmax_drop: 0.02\ncorrection: none\n")
    code, out = quant("gate", "--baseline", str(run), "--candidate", f"{run}:lose9", "--policy", alone)
    assert code == 1 and "lower bound +0.024 > margin 0.020" in out, out
    code, out = quant("gate", "--baseline", str(run), "--candidate", f"{run}:lose9", "--rule", "non-inferiority")
    assert code == 3, out
    assert "family-wise alpha 0.05, Bonferroni" in out
    assert "lower bound +0.019 <= margin 0.020 at confidence 0.975 over 2 checks" in out
