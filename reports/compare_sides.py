"""`quant compare`: per variant and task, candidate minus baseline between two runs, with the paired interval
where both sides kept per-item scores. Sides are what `quant gate` takes (reports/gate.py: load_side)."""

from __future__ import annotations

from reports.gate import pick_variant, side_items
from reports.metric_kinds import higher_is_better, is_mean_metric
from reports.samples import ItemMismatch, paired_scores


def _pairs(base: dict, base_variant: str | None, cand: dict, cand_variant: str | None) -> list[tuple[dict, dict]]:
    """A named (or only) variant on either side: that pair; else every variant both runs have, by name."""
    if base_variant or cand_variant or len(base["variants"]) == 1 or len(cand["variants"]) == 1:
        only = lambda r, v: v or (next(iter(r["variants"])) if len(r["variants"]) == 1 else r["baseline"])
        return [(pick_variant(base, only(base, base_variant), True, "--baseline"),
                 pick_variant(cand, only(cand, cand_variant), False, "--candidate"))]
    return [(pick_variant(base, name, True, "--baseline"), pick_variant(cand, name, False, "--candidate"))
            for name in base["variants"] if name in cand["variants"]]


def _paired(b_side: dict, c_side: dict, task: str, entry: dict) -> dict | None:
    if not is_mean_metric(entry):
        return None
    base, cand = side_items(b_side, task, entry["metric"]), side_items(c_side, task, entry["metric"])
    if not base or not cand:
        return None
    try:
        return paired_scores(base, cand, task, higher_is_better=higher_is_better(entry))
    except ItemMismatch:
        return None   # scored on other items: the means are shown, no paired interval


def compare_sides(base: dict, base_variant: str | None, cand: dict, cand_variant: str | None) -> list[dict]:
    """Rows: variant (or "a -> b"), task, metric, both scores, delta (candidate - baseline) and, where per-item
    scores pair, the paired interval of the delta in the metric's own direction and the paired n."""
    rows = []
    for b_side, c_side in _pairs(base, base_variant, cand, cand_variant):
        label = b_side["name"] if b_side["name"] == c_side["name"] else f"{b_side['name']} -> {c_side['name']}"
        for task, entry in b_side.get("accuracy", {}).items():
            other = c_side.get("accuracy", {}).get(task)
            if other is None or other["metric"] != entry["metric"]:
                continue
            stats = _paired(b_side, c_side, task, entry)
            sign = 1 if higher_is_better(entry) else -1
            ci = None if stats is None else sorted(sign * x for x in stats["ci95"])
            rows.append({"variant": label, "task": task, "metric": entry["metric"], "baseline": entry["value"],
                         "candidate": other["value"], "delta": other["value"] - entry["value"], "ci": ci,
                         "n_paired": None if stats is None else stats["n_paired"]})
    return rows

