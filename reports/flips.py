"""The items behind a verdict: those a candidate scored differently from the baseline, lost ones first, each
with its prompt, both responses, the filtered answers the metric scored, and a unified diff of the responses.
Items are paired as the gate pairs them (reports/samples.py)."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path

from core.run_layout import RunLayout
from reports.metric_kinds import higher_is_better
from reports.samples import ItemFileError, metric_key, paired_ids, records_scores


@dataclass
class Flip:
    doc_id: object
    prompt: str
    target: object
    baseline_response: str
    candidate_response: str
    baseline_answer: str
    candidate_answer: str
    baseline_score: float
    candidate_score: float
    lost: bool                 # the candidate scored it worse (by the metric's direction)
    diff: list[str]            # unified diff, baseline -> candidate response


@dataclass
class TaskFlips:
    task: str
    metric: str
    n_paired: int
    flips: list[Flip]

    @property
    def lost(self) -> int:
        return sum(f.lost for f in self.flips)

    @property
    def gained(self) -> int:
        return len(self.flips) - self.lost


def _text(value) -> str:
    """A response or filtered answer as text: a generation as it is, anything else (log-likelihoods of a
    multiple-choice item) as compact JSON, a sampled item's answers one after another."""
    while isinstance(value, list) and len(value) == 1:
        value = value[0]
    if value is None or value == {}:
        return ""
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):   # a sampled item's K answers
        return "\n".join(f"[sample {i}] {v}" for i, v in enumerate(value, 1))
    return value if isinstance(value, str) else json.dumps(value)


def _filtered(record: dict, key: str) -> str:
    """The answer the metric scored: the filtered response of the metric's filter ("exact_match,strict")."""
    answers = record.get("filtered_resps") or {}
    name = key.split(",", 1)[1] if "," in key else next(iter(answers), None)
    return _text(answers.get(name)) if isinstance(answers, dict) and name in answers else _text(answers)


def read_records(path: Path) -> list[dict]:
    """A task's per-item file (variants/<v>/evals/<task>.jsonl) as records; ItemFileError if unreadable."""
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ItemFileError(f"{path}: cannot read as JSON lines ({exc})") from None


def side_records(side: dict, task: str) -> tuple[Path, list[dict]] | None:
    """A gate side's per-item records of a task (a sweep's file, or an lm-eval directory's samples), or None."""
    if "_items" in side:
        return side["_items"].get(task)
    if side.get("_run_dir") is None:
        return None
    path = RunLayout(Path(side["_run_dir"])).variant(side["name"]).items(task)
    return (path, read_records(path)) if path.is_file() else None


def task_flips(task: str, entry: dict, base: tuple[Path, list[dict]], cand: tuple[Path, list[dict]]) -> TaskFlips:
    """The flipped items of one task. `entry` is the baseline's accuracy entry (its metric and direction)."""
    metric, up = entry["metric"], higher_is_better(entry)
    base_scores, cand_scores = records_scores(*base, metric), records_scores(*cand, metric)
    base_by_id = {r["doc_id"]: r for r in base[1]}
    cand_by_id = {r["doc_id"]: r for r in cand[1]}
    pairs = paired_ids(base_scores, cand_scores)
    flips = []
    for b_id, c_id in pairs:
        b_score, c_score = base_scores.items[b_id].score, cand_scores.items[c_id].score
        if b_score == c_score:
            continue
        b, c = base_by_id[b_id], cand_by_id[c_id]
        key = metric_key(b["metrics"], metric)
        b_resp, c_resp = _text(b.get("resps")), _text(c.get("resps"))
        diff = list(difflib.unified_diff(b_resp.splitlines(), c_resp.splitlines(), "baseline", "candidate",
                                         lineterm=""))
        flips.append(Flip(b_id, str(b.get("prompt") or ""), b.get("target"), b_resp, c_resp, _filtered(b, key),
                          _filtered(c, key), b_score, c_score, (c_score < b_score) == up, diff))
    # lost first, the largest change first within each side, then in the gate's pairing order (a stable sort)
    flips.sort(key=lambda f: (not f.lost, -abs(f.candidate_score - f.baseline_score)))
    return TaskFlips(task, metric, len(pairs), flips)


def diff_sides(baseline_spec: str, candidate_spec: str, tasks: list[str] | None = None
               ) -> tuple[str, str, list[TaskFlips]]:
    """(baseline name, candidate name, flips per task) of two gate sides (run dirs, results.json, lm-eval
    output directories, [:VARIANT]); GateInputError for anything that cannot be paired."""
    from reports.gate import GateInputError, load_side, pick_variant

    base_results, base_variant = load_side(baseline_spec)
    cand_results, cand_variant = load_side(candidate_spec)
    baseline = pick_variant(base_results, base_variant, default_baseline=True, label="--baseline")
    candidate = pick_variant(cand_results, cand_variant, default_baseline=False, label="--candidate")
    accuracy = baseline.get("accuracy", {})
    for task in tasks or []:
        if task not in accuracy:
            raise GateInputError(f"{baseline['_path']}: no task {task!r} in baseline {baseline['name']} "
                                 f"(tasks: {', '.join(accuracy) or 'none'})")
    found = []
    try:
        for task in tasks or list(accuracy):
            sides = [side_records(side, task) for side in (baseline, candidate)]
            for side, records in zip((baseline, candidate), sides):
                if records is None:
                    raise GateInputError(f"{side['_path']}: {side['name']} has no per-item records of {task} "
                                         f"(variants/<name>/evals/{task}.jsonl, or lm-eval's --log_samples)")
            found.append(task_flips(task, accuracy[task], *sides))
    except ItemFileError as exc:
        raise GateInputError(str(exc)) from None
    return baseline["name"], candidate["name"], found
