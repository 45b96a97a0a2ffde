"""`quant gate` exit codes (0 pass, 1 regression, 2 bad input), JUnit output, and `quant choose`."""

import pytest

from tests.fixtures import variant, write_items, write_run
from tests.helpers import quant, quant_json


@pytest.fixture
def run(tmp_path):
    return write_run(tmp_path / "run", {
        "bf16": variant({"math": 0.90, "code": 0.80}, tok_s=100),
        "ok-q": variant({"math": 0.89, "code": 0.78}, tok_s=150),
        "bad-q": variant({"math": 0.60, "code": 0.79}, tok_s=200),
        "unserved": variant({"math": 0.90, "code": 0.80}, status="unsupported"),
    })


def test_pass(run, tmp_path):
    code, out = quant("gate", "--baseline", str(run), "--candidate", f"{run}:ok-q", "--junit", str(tmp_path / "j.xml"))
    assert code == 0, out
    assert 'failures="0"' in (tmp_path / "j.xml").read_text()


def test_regression_and_junit(run, tmp_path):
    code, out = quant("gate", "--baseline", str(run), "--candidate", f"{run / 'results.json'}:bad-q",
                      "--junit", str(tmp_path / "j.xml"))
    assert code == 1, out
    assert "REGRESSION" in out
    xml = (tmp_path / "j.xml").read_text()
    assert 'tests="2" failures="1"' in xml and "math.exact_match" in xml


def test_per_task_policy_file(run, tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text("max_drop: 0.05\nper_task: {math: 0.005}\n")
    code, _ = quant("gate", "--baseline", str(run), "--candidate", f"{run}:ok-q", "--policy", str(policy))
    assert code == 1


def test_a_policy_files_mistakes_are_all_named_at_once_each_at_its_line(run, tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text("max_drop: 5\nrule: significnt\nper_tsk: {math: 0.01}\nmin_nn: 3\n")
    code, out = quant("gate", "--baseline", str(run), "--candidate", f"{run}:ok-q", "--policy", str(policy))
    assert code == 2 and out.startswith(f"gate error: {policy}: 4 problems\n"), out
    for line, field in enumerate(("max_drop", "rule", "per_tsk", "min_nn"), start=1):
        assert f"\n  {policy}:{line}: {field}: " in out, out
    policy.write_text("gates:\n  max_drop: 0.05\n")   # a recipe's section, pasted whole
    code, out = quant("gate", "--baseline", str(run), "--candidate", f"{run}:ok-q", "--policy", str(policy))
    assert code == 2 and "without the `gates:` line around it" in out, out
    code, out = quant("gate", "--baseline", str(run), "--candidate", f"{run}:ok-q", "--policy", str(tmp_path / "no"))
    assert code == 2 and out.strip() == f"gate error: {tmp_path / 'no'}: no such file", out
    policy.write_text("")   # empty: the defaults
    assert quant("gate", "--baseline", str(run), "--candidate", f"{run}:ok-q", "--policy", str(policy))[0] == 0


@pytest.mark.parametrize("candidate", ["{run}/missing", "{run}:nope"])
def test_bad_input_is_exit_2(run, candidate):
    code, out = quant("gate", "--baseline", str(run), "--candidate", candidate.format(run=run))
    assert code == 2, out
    assert "Traceback" not in out


def test_choose_fastest_within_drop(run):
    code, report = quant_json("choose", str(run), "--task", "math", "--max-drop", "0.02")
    assert code == 0, report
    choice = report["choices"]["math"]
    assert choice["variant"] == "ok-q"
    assert "bad-q" in choice["rejected"] and "unserved" in choice["rejected"]
    assert "--model /ckpt" in choice["serve_command"] or "/ckpt" in choice["serve_command"]



def test_choose_reads_a_lower_is_better_metric_the_right_way(tmp_path):
    """bits/byte rises when a variant gets worse: +0.13 is a drop of 0.13, and -0.01 is no drop at all."""
    from tests.fixtures import accuracy
    def ppl(value, tok_s):
        return {**variant({}, tok_s=tok_s), "accuracy": {"docs": accuracy(value, metric="bits_per_byte",
                                                                            aggregation="bits_per_byte")}}
    run = write_run(tmp_path / "run", {"bf16": ppl(1.00, 100), "worse": ppl(1.13, 300), "better": ppl(0.99, 150)})
    code, report = quant_json("choose", str(run), "--task", "docs", "--max-drop", "0.05")
    assert code == 0, report
    choice = report["choices"]["docs"]
    assert choice["variant"] == "better", choice
    assert "accuracy drop 0.130 > 0.050" in choice["rejected"]["worse"]


@pytest.fixture
def paired_run(tmp_path):
    """bf16 right on 180 of 200; 'drop' loses 24 of those; 'same' flips 2 each way; 'tiny' scored 10 items."""
    base = [1.0] * 180 + [0.0] * 20
    variants = {"bf16": base, "drop": [0.0] * 24 + [1.0] * 156 + [0.0] * 20,
                "same": [0.0, 0.0] + [1.0] * 178 + [1.0, 1.0] + [0.0] * 18}
    run = write_run(tmp_path / "run", {n: variant({"math": sum(s) / len(s)}) for n, s in variants.items()}
                    | {"tiny": variant({"math": 0.5})})
    for name, scores in variants.items():
        write_items(run, name, "math", scores)
    write_items(run, "tiny", "math", base[:5] + [0.0] * 5)
    return run


@pytest.mark.parametrize("rule", ["point", "significant", "non-inferiority"])
def test_every_rule_catches_a_real_drop_and_passes_a_rerun(paired_run, rule, tmp_path):
    policy = tmp_path / "p.yaml"
    policy.write_text(f"rule: {rule}\nmax_drop: 0.05\n")
    code, out = quant("gate", "--baseline", str(paired_run), "--candidate", f"{paired_run}:drop", "--policy", str(policy))
    assert code == 1, out
    code, out = quant("gate", "--baseline", str(paired_run), "--candidate", f"{paired_run}:same", "--policy", str(policy))
    assert code == 0, out
    assert "-2/+2" in out


def test_inconclusive_is_exit_3_with_items_needed(paired_run, tmp_path):
    md = tmp_path / "gate.md"
    code, out = quant("gate", "--baseline", str(paired_run), "--candidate", f"{paired_run}:tiny",
                      "--rule", "significant", "--markdown", str(md), "--junit", str(tmp_path / "j.xml"),
                      "--allow-partial-overlap")
    assert code == 3, out
    assert "10 of 200/10" in out and "partial overlap" in md.read_text()
    assert "items would decide it" in out and "INCONCLUSIVE" in md.read_text()
    assert 'failures="1" skipped="0"' in (tmp_path / "j.xml").read_text()   # inconclusive fails the job


def test_statistical_rule_without_per_item_scores_is_exit_2(run):
    code, out = quant("gate", "--baseline", str(run), "--candidate", f"{run}:ok-q", "--rule", "non-inferiority")
    assert code == 2 and "per-item scores" in out


def test_perf_gates(run, tmp_path):
    policy = tmp_path / "p.yaml"
    policy.write_text("max_drop: 0.05\nperf: {max_throughput_drop: 0.1, ttft_p99_ms: 50}\n")
    code, out = quant("gate", "--baseline", str(run), "--candidate", f"{run}:ok-q", "--policy", str(policy))
    assert code == 0, out
    policy.write_text("max_drop: 0.05\nperf: {ttft_p99_ms: 5}\n")
    code, out = quant("gate", "--baseline", str(run), "--candidate", f"{run}:ok-q", "--policy", str(policy))
    assert code == 1 and "ttft_p99_ms" in out


def test_choose_with_slo_objective_and_every_task(run):
    code, out = quant("choose", str(run), "--max-drop", "0.05", "--slo", "ttft_p99=5ms")
    assert code == 1 and "no served variant meets" in out           # every variant's TTFT p99 is 10 ms
    code, report = quant_json("choose", str(run), "--max-drop", "0.05", "--slo", "ttft_p99=0.5s")
    assert code == 0 and report["choices"]["math"]["variant"] == "ok-q"
    assert report["choices"]["code"]["variant"] == "bad-q" and report["one_variant_for_all"] == "ok-q"
    code, out = quant("choose", str(run), "--task", "code", "--max-drop", "0.05", "--objective", "memory")
    assert code == 0 and "deploy" in out


def test_choose_bad_slo_is_one_clear_error(run):
    code, out = quant("choose", str(run), "--task", "math", "--slo", "ttft<1")
    assert code == 2 and "expected e.g. ttft_p99=500ms" in out and "Traceback" not in out
