"""Per-item scores a sweep stored (variants/<name>/evals/<task>.jsonl), paired across variants by doc_id."""

from __future__ import annotations

import json
from pathlib import Path

from evals.stats import paired_difference


class ItemMismatch(ValueError):
    pass


def item_scores(run_dir: Path | str | None, variant: str, task: str, metric: str) -> dict[int, tuple[str, float]] | None:
    """doc_id -> (prompt, score), or None where the run has no per-item file."""
    if run_dir is None:
        return None
    path = Path(run_dir) / "variants" / variant / "evals" / f"{task}.jsonl"
    if not path.is_file():
        return None
    records = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return {r["doc_id"]: (r.get("prompt", ""), float(r["metrics"][metric])) for r in records}


def paired_scores(base: dict, cand: dict, task: str, z: float | None = None) -> dict:
    common = sorted(set(base) & set(cand))
    if any(base[i][0] != cand[i][0] for i in common):
        raise ItemMismatch(f"{task}: baseline and candidate were scored on different items")
    kwargs = {} if z is None else {"z": z}
    return paired_difference([base[i][1] for i in common], [cand[i][1] for i in common], **kwargs)


def paired_between(base_dir, base_name: str, cand_dir, cand_name: str, task: str, metric: str,
                   z: float | None = None) -> dict | None:
    """Paired statistics of two variants' per-item scores (None where either has no per-item file)."""
    base = item_scores(base_dir, base_name, task, metric)
    cand = item_scores(cand_dir, cand_name, task, metric)
    if not base or not cand:
        return None
    return paired_scores(base, cand, task, z)
