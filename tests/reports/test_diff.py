"""`quant diff`: the flipped items behind a verdict, lost first, with both responses, the filtered answers and
a unified diff; on a sweep's run directory or an lm-eval output directory as either side."""

import json
import subprocess
import sys

import pytest

from core.run_layout import RunLayout
from tests.fixtures import variant, write_run
from tests.helpers import REPO, quant

ANSWERS = {"bf16": ["12", "7", "30", "5"], "w4": ["12", "8", "31", "5"]}
TARGETS = ["12", "7", "31", "5"]   # w4 loses item 1 (7 -> 8) and gains item 2 (30 -> 31)


def record(doc_id: int, answer: str) -> dict:
    return {"doc_id": doc_id, "prompt": f"Q{doc_id}: what is it?", "target": TARGETS[doc_id],
            "resps": [[f"Let me think.\nThe answer is {answer}."]],
            "filtered_resps": {"strict-match": [answer]},
            "metrics": {"exact_match,strict-match": float(answer == TARGETS[doc_id])}}


@pytest.fixture
def run(tmp_path):
    run = write_run(tmp_path / "run", {name: variant({"math": sum(a == t for a, t in zip(answers, TARGETS)) / 4})
                                       for name, answers in ANSWERS.items()})
    for name, answers in ANSWERS.items():
        path = RunLayout(run).variant(name).items("math")
        path.parent.mkdir(parents=True)
        path.write_text("".join(json.dumps(record(i, a)) + "\n" for i, a in enumerate(answers)))
    return run


def lm_eval_dir(root, name: str):
    """An `lm_eval --output_path DIR --log_samples` directory of one task, in lm-eval's own file format."""
    out = root / name / name
    out.mkdir(parents=True)
    config = {"task": "math", "output_type": "generate_until",
              "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True}]}
    (out / "results_2026-01-01T00-00-00.json").write_text(json.dumps(
        {"results": {"math": {}}, "configs": {"math": config}, "model_name": name}))
    rows = [{**{k: v for k, v in record(i, a).items() if k not in ("metrics", "filtered_resps", "prompt")},
             "filter": "strict-match", "filtered_resps": [a], "exact_match": float(a == TARGETS[i]),
             "arguments": {"gen_args_0": {"arg_0": f"Q{i}: what is it?", "arg_1": {}}}}
            for i, a in enumerate(ANSWERS[name])]
    (out / "samples_math_2026-01-01T00-00-00.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root / name


def test_lists_the_flips_lost_first_with_responses_answers_and_a_diff(run):
    code, out = quant("diff", "--baseline", str(run), "--candidate", f"{run}:w4")
    assert code == 0, out
    assert "math (exact_match): 2 of 4 paired items flipped: 1 lost, 1 gained" in out
    lost, gained = out.index("LOST item 1"), out.index("GAINED item 2")
    assert lost < gained
    assert "answer (filtered): baseline '7', candidate '8'" in out and "Q1: what is it?" in out
    assert "-The answer is 7.\n    +The answer is 8." in out and "target: 7" in out


def test_json_to_stdout_and_a_file(run, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "quant.cli", "diff", "--baseline", str(run), "--candidate",
                           f"{run}:w4", "--json", "-"], capture_output=True, text=True, cwd=REPO)
    report = json.loads(proc.stdout)
    assert proc.returncode == 0 and "LOST item 1" in proc.stderr
    [math] = report["tasks"]
    assert (math["lost"], math["gained"], math["n_paired"]) == (1, 1, 4)
    assert [f["doc_id"] for f in math["flips"]] == [1, 2] and math["flips"][0]["lost"]
    assert math["flips"][0]["candidate_response"] == "Let me think.\nThe answer is 8."
    code, _ = quant("diff", "--baseline", str(run), "--candidate", f"{run}:w4", "--json", str(tmp_path / "d.json"))
    assert code == 0 and json.loads((tmp_path / "d.json").read_text()) == report


def test_an_lm_eval_output_directory_as_either_side(run, tmp_path):
    base, cand = lm_eval_dir(tmp_path, "bf16"), lm_eval_dir(tmp_path, "w4")
    code, out = quant("diff", "--baseline", str(base), "--candidate", str(cand))
    assert code == 0, out
    assert "diff: w4 vs bf16" in out and "1 lost, 1 gained" in out and "baseline '7', candidate '8'" in out
    code, out = quant("diff", "--baseline", str(base), "--candidate", f"{run}:w4")
    assert code == 0 and "1 lost, 1 gained" in out, out


@pytest.mark.parametrize("candidate, extra, needle", [(":w4", ["--task", "maths"], "no task 'maths'"),
                                                    (":nope", [], "no variant 'nope'")])
def test_bad_input_is_one_line_exit_2(run, candidate, extra, needle):
    code, out = quant("diff", "--baseline", str(run), "--candidate", f"{run}{candidate}", *extra)
    assert code == 2 and out.startswith("diff error: ") and needle in out and len(out.strip().splitlines()) == 1


def test_report_html_links_each_variant_to_its_flips(run):
    from reports.render import render_all

    page = next(p for p in render_all(run, json.loads((run / "results.json").read_text())) if p.suffix == ".html")
    html = page.read_text()
    assert "<a href='#flips-w4'>w4</a>" in html and "<a href='#flips-bf16'>" not in html
    section = html[html.index("<details id='flips-w4'>"):]
    assert "<b>w4</b>: 1 lost, 1 gained" in section and "math: 1 lost, 1 gained of 4" in section
    assert section.index("<b>lost</b> item 1") < section.index("<b>gained</b> item 2")
    assert "-The answer is 7.\n+The answer is 8." in section and "src=" not in section   # self-contained text
