"""Per-item scores a sweep stored (variants/<name>/evals/<task>.jsonl), paired across variants by doc_id."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from evals.stats import paired_difference


class ItemMismatch(ValueError):
    pass


class ItemFileError(ValueError):
    """A per-item file that cannot be read as scores; the message starts with its path."""


@dataclass
class Item:
    prompt: str
    score: float
    group: object = None


@dataclass
class ItemScores:
    path: Path
    items: dict[int, Item]   # doc_id -> item

    def mean(self) -> float:
        return sum(i.score for i in self.items.values()) / len(self.items)


def _item(path: Path, line_no: int, line: str, metric: str) -> tuple[int, Item]:
    where = f"{path}: line {line_no}"
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ItemFileError(f"{where}: not valid JSON ({exc.msg})") from None
    if not isinstance(record, dict) or "doc_id" not in record:
        raise ItemFileError(f"{where}: not a per-item record (no doc_id)")
    metrics = record.get("metrics")
    if not isinstance(metrics, dict) or metric not in metrics:
        have = ", ".join(metrics) if isinstance(metrics, dict) and metrics else "none"
        raise ItemFileError(f"{where}: no metric {metric!r} (has: {have})")
    value = metrics[metric]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ItemFileError(f"{where}: metric {metric!r} is {value!r}, not a finite number")
    group = record.get("group")
    return record["doc_id"], Item(str(record.get("prompt") or ""), float(value),
                                  group if group is None or isinstance(group, int | str) else str(group))


def item_scores(run_dir: Path | str | None, variant: str, task: str, metric: str) -> ItemScores | None:
    """Every item's score, or None where the run has no per-item file."""
    if run_dir is None:
        return None
    path = Path(run_dir) / "variants" / variant / "evals" / f"{task}.jsonl"
    if not path.is_file():
        return None
    items: dict[int, Item] = {}
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ItemFileError(f"{path}: cannot read ({exc})") from None
    for line_no, line in enumerate(lines, 1):
        if line.strip():
            doc_id, item = _item(path, line_no, line, metric)
            if doc_id in items:
                raise ItemFileError(f"{path}: line {line_no}: doc_id {doc_id} appears twice")
            items[doc_id] = item
    if not items:
        raise ItemFileError(f"{path}: no items")
    return ItemScores(path, items)


def paired_scores(base: ItemScores, cand: ItemScores, task: str, confidence: float = 0.95,
                  higher_is_better: bool = True) -> dict:
    """Paired statistics on the items both sides scored (by doc_id, prompts equal), with how many each side
    scored and the two sides' means on the shared items."""
    common = sorted(set(base.items) & set(cand.items), key=str)
    if not common:
        raise ItemMismatch(f"{task}: baseline ({base.path}) and candidate ({cand.path}) share no doc_id")
    if any(base.items[i].prompt != cand.items[i].prompt for i in common):
        raise ItemMismatch(f"{task}: baseline and candidate were scored on different items (same doc_id, "
                           f"different prompt)")
    groups = [base.items[i].group for i in common]
    b = [base.items[i].score for i in common]
    c = [cand.items[i].score for i in common]
    stats = paired_difference(b, c, groups if all(g is not None for g in groups) else None, confidence,
                              higher_is_better)
    return stats | {"n_baseline": len(base.items), "n_candidate": len(cand.items), "n_paired": len(common),
                    "baseline_mean": sum(b) / len(b), "candidate_mean": sum(c) / len(c)}


def paired_between(base_dir, base_name: str, cand_dir, cand_name: str, task: str, metric: str,
                   confidence: float = 0.95, higher_is_better: bool = True) -> dict | None:
    """Paired statistics of two variants' per-item scores (None where either has no per-item file)."""
    base = item_scores(base_dir, base_name, task, metric)
    cand = item_scores(cand_dir, cand_name, task, metric)
    if not base or not cand:
        return None
    return paired_scores(base, cand, task, confidence, higher_is_better)
