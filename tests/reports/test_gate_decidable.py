"""A policy that can never decide on the run's item counts is an error naming the numbers (exit 2), not an
inconclusive result every time: min_n above the items the baseline scored (HumanEval has 164; a policy asked
for 200), or a non-inferiority margin narrower than the interval those items allow even when the candidate
answers every item as the baseline did. An inconclusive check that remains is a JUnit failure with its reason."""

import pytest

from quant.cli import main
from tests.fixtures import variant, write_items, write_run

HUMANEVAL = 164


@pytest.fixture
def run(tmp_path):
    """164 items, the baseline right on 100; 'same' answers every item as the baseline did; 'close' loses 5."""
    base = [1.0] * 100 + [0.0] * 64
    scores = {"bf16": base, "same": list(base), "close": [0.0] * 5 + base[5:]}
    run = write_run(tmp_path / "run", {n: variant({"humaneval": sum(s) / len(s)}) for n, s in scores.items()})
    for name, s in scores.items():
        write_items(run, name, "humaneval", s, metric="exact_match")
    return run


def gate(capsys, run, candidate, policy_text, tmp_path, *extra) -> tuple[int, str]:
    policy = tmp_path / "gate-policy.yaml"
    policy.write_text(policy_text)
    code = main(["gate", "--baseline", str(run), "--candidate", f"{run}:{candidate}", "--policy", str(policy), *extra])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_min_n_above_the_items_a_task_has_is_an_error_naming_both(run, capsys, tmp_path):
    code, out = gate(capsys, run, "same", "rule: significant\nmin_n: 200\n", tmp_path)
    assert code == 2, out
    assert f"gate error: {tmp_path / 'gate-policy.yaml'}: min_n 200 but the baseline scored {HUMANEVAL} items of " \
           f"humaneval" in out
    assert f"set min_n to at most {HUMANEVAL}" in out and "Traceback" not in out
    code, out = gate(capsys, run, "same", f"rule: significant\nmin_n: {HUMANEVAL}\n", tmp_path)
    assert code == 0, out


def test_min_n_is_checked_on_whole_run_means_too(tmp_path, capsys):
    run = write_run(tmp_path / "run", {"bf16": variant({"humaneval": 0.6}), "q": variant({"humaneval": 0.6})})
    code, out = gate(capsys, run, "q", "min_n: 201\n", tmp_path)   # the fixtures' runs scored 200 items
    assert code == 2 and "min_n 201 but the baseline scored 200 items of humaneval" in out, out


def test_the_baseline_runs_recipe_is_named_when_its_gates_are_at_fault(tmp_path, capsys):
    run = write_run(tmp_path / "run", {"bf16": variant({"humaneval": 0.6}), "q": variant({"humaneval": 0.6})},
                    gates={"min_n": 500})
    code = main(["gate", "--baseline", str(run), "--candidate", f"{run}:q"])
    out = capsys.readouterr().err
    assert code == 2 and f"gate error: {run / 'results.json'}: recipe.gates: min_n 500 but" in out, out


def test_a_non_inferiority_margin_no_unchanged_candidate_can_meet_is_an_error(run, capsys, tmp_path):
    """Zero flips in 164 items still leave an upper bound of about +0.022: a margin of 0.02 can never pass."""
    code, out = gate(capsys, run, "same", "rule: non-inferiority\nmax_drop: 0.02\n", tmp_path)
    assert code == 2, out
    assert "rule non-inferiority can never pass humaneval on 164 items" in out
    assert "upper bound +0.02" in out and "> margin 0.020" in out
    # max_relative_drop tightens the margin by the baseline's score (0.61 here): 0.03 of it is 0.018
    code, out = gate(capsys, run, "same", "rule: non-inferiority\nmax_drop: 0.05\nmax_relative_drop: 0.03\n",
                     tmp_path)
    assert code == 2 and "> margin 0.018" in out, out
    code, out = gate(capsys, run, "same", "rule: non-inferiority\nmax_drop: 0.05\n", tmp_path)
    assert code == 0, out


def test_an_inconclusive_check_is_a_junit_failure_with_its_reason(run, capsys, tmp_path):
    junit = tmp_path / "gate.xml"
    code, out = gate(capsys, run, "close", "rule: significant\nmax_drop: 0.02\n", tmp_path, "--junit", str(junit))
    assert code == 3, out
    xml = junit.read_text()
    assert 'tests="1" failures="1" skipped="0"' in xml and "<skipped" not in xml
    assert '<failure type="inconclusive" message="inconclusive: drop 0.030 &gt; margin 0.020 but not significant' in xml
