"""Per-item scores a sweep stored (variants/<name>/evals/<task>.jsonl), paired across variants by lm-eval's
doc_hash (prompts compared by prompt_hash) where both sides have them, else by doc_id (prompts compared)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from core.run_layout import RunLayout
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
    doc_hash: str | None = None
    prompt_hash: str | None = None


@dataclass
class ItemScores:
    path: Path
    items: dict[int, Item]   # doc_id -> item

    def mean(self) -> float:
        return sum(i.score for i in self.items.values()) / len(self.items)


def metric_key(metrics: dict, metric: str) -> str | None:
    """The per-item key of a metric: its own name, or lm-eval's "metric,filter" when one filter has it (a
    results.json names a single-filter task's metric plainly; older per-item files used plain names too)."""
    if metric in metrics:
        return metric
    keyed = [k for k in metrics if k.split(",")[0] == metric]
    return keyed[0] if len(keyed) == 1 else None


def _item(path: Path, line_no: int, line: str, metric: str) -> tuple[int, Item]:
    where = f"{path}: line {line_no}"
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ItemFileError(f"{where}: not valid JSON ({exc.msg})") from None
    return _record_item(where, record, metric)


def _record_item(where: str, record, metric: str) -> tuple[int, Item]:
    if not isinstance(record, dict) or "doc_id" not in record:
        raise ItemFileError(f"{where}: not a per-item record (no doc_id)")
    metrics = record.get("metrics")
    key = metric_key(metrics, metric) if isinstance(metrics, dict) else None
    if key is None:
        have = ", ".join(metrics) if isinstance(metrics, dict) and metrics else "none"
        raise ItemFileError(f"{where}: no metric {metric!r} (has: {have})")
    value = metrics[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ItemFileError(f"{where}: metric {metric!r} is {value!r}, not a finite number")
    group = record.get("group")
    hashes = [h if isinstance(h, str) else None for h in (record.get("doc_hash"), record.get("prompt_hash"))]
    return record["doc_id"], Item(str(record.get("prompt") or ""), float(value),
                                  group if group is None or isinstance(group, int | str) else str(group), *hashes)


def item_scores(run_dir: Path | str | None, variant: str, task: str, metric: str) -> ItemScores | None:
    """Every item's score, or None where the run has no per-item file."""
    if run_dir is None:
        return None
    path = RunLayout(Path(run_dir)).variant(variant).items(task)
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


def records_scores(path: Path, records: list[dict], metric: str) -> ItemScores:
    """Scores from per-item records already in memory (an lm-eval samples file, converted)."""
    items = dict(_record_item(f"{path}: item {n}", r, metric) for n, r in enumerate(records, 1))
    if not items:
        raise ItemFileError(f"{path}: no items")
    return ItemScores(Path(path), items)


def paired_scores(base: ItemScores, cand: ItemScores, task: str, confidence: float = 0.95,
                  higher_is_better: bool = True) -> dict:
    """Paired statistics on the items both sides scored (by doc_hash or doc_id, prompts equal), with how many
    each side scored and the two sides' means on the shared items."""
    pairs, by = _pairs(base, cand)
    if not pairs:
        raise ItemMismatch(f"{task}: baseline ({base.path}) and candidate ({cand.path}) share no {by}")
    if any(b.prompt_hash != c.prompt_hash if by == "doc_hash" else b.prompt != c.prompt for b, c in pairs):
        raise ItemMismatch(f"{task}: baseline and candidate were scored on different items (same {by}, "
                           f"different prompt)")
    groups = [b.group for b, _ in pairs]
    b = [item.score for item, _ in pairs]
    c = [item.score for _, item in pairs]
    stats = paired_difference(b, c, groups if all(g is not None for g in groups) else None, confidence,
                              higher_is_better)
    return stats | {"n_baseline": len(base.items), "n_candidate": len(cand.items), "n_paired": len(pairs),
                    "baseline_mean": sum(b) / len(b), "candidate_mean": sum(c) / len(c)}


def _by_hash(scores: ItemScores) -> dict[str, Item] | None:
    """doc_hash -> item, where every item has both hashes and no two share a doc_hash."""
    items = list(scores.items.values())
    if not all(i.doc_hash and i.prompt_hash for i in items):
        return None
    by_hash = {i.doc_hash: i for i in items}
    return by_hash if len(by_hash) == len(items) else None


def _pairs(base: ItemScores, cand: ItemScores) -> tuple[list[tuple[Item, Item]], str]:
    b, c, by = _by_hash(base), _by_hash(cand), "doc_hash"
    if b is None or c is None:
        b, c, by = base.items, cand.items, "doc_id"
    return [(b[k], c[k]) for k in sorted(set(b) & set(c), key=str)], by


def paired_ids(base: ItemScores, cand: ItemScores) -> list[tuple[object, object]]:
    """(baseline doc_id, candidate doc_id) of every item pair, paired as paired_scores pairs them."""
    by_hash = _by_hash(base) is not None and _by_hash(cand) is not None
    keyed = [{(item.doc_hash if by_hash else doc_id): doc_id for doc_id, item in s.items.items()}
             for s in (base, cand)]
    return [(keyed[0][k], keyed[1][k]) for k in sorted(set(keyed[0]) & set(keyed[1]), key=str)]


def paired_between(base_dir, base_name: str, cand_dir, cand_name: str, task: str, metric: str,
                   confidence: float = 0.95, higher_is_better: bool = True) -> dict | None:
    """Paired statistics of two variants' per-item scores (None where either has no per-item file)."""
    base = item_scores(base_dir, base_name, task, metric)
    cand = item_scores(cand_dir, cand_name, task, metric)
    if not base or not cand:
        return None
    return paired_scores(base, cand, task, confidence, higher_is_better)
