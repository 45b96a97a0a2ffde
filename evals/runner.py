"""Run an lm-eval task on a backend LM; keep every per-sample record and summarise with CIs."""

from __future__ import annotations

import json
import math
from pathlib import Path

from evals.registry import code_execution, lm_eval_spec, primary_metric, task_manager
from evals.sandbox import unisolated_permitted
from evals.stats import mean_ci

SAMPLE_KEYS = ("doc_id", "target", "resps", "filtered_resps")


def _metric_names(config: dict, filters: list[str]) -> list[tuple[str, str, str]]:
    """(our name, lm-eval's metric, filter): plain metric names unless the task has several filters."""
    metrics = [m["metric"] if isinstance(m["metric"], str) else m["metric"].__name__
               for m in config.get("metric_list", [])]
    return [(m if len(filters) == 1 else f"{m},{f}", m, f) for f in filters for m in metrics]


def _number(value) -> float | None:
    if isinstance(value, bool | int | float) and math.isfinite(float(value)):
        return float(value)
    return None


def _directions(config: dict) -> dict[str, dict]:
    """Per metric, what its task config says: higher_is_better and the aggregation's name (the gate reads
    both: a lower-is-better metric's drop is the increase; a non-mean aggregate cannot be paired)."""
    out = {}
    for m in config.get("metric_list", []):
        name = m["metric"] if isinstance(m["metric"], str) else m["metric"].__name__
        agg = m.get("aggregation", "mean")
        out[name] = {"higher_is_better": bool(m.get("higher_is_better", True)),
                     "aggregation": agg if isinstance(agg, str) else getattr(agg, "__name__", "custom")}
    return out


def evaluate_task(lm, task) -> tuple[dict, list[dict]]:
    """task: a recipe Task. -> (summary, samples). summary: {metric: {value, n, ci95}, "primary": name}."""
    import lm_eval

    options = {k: v for k, v in task.lm_eval_options().items() if k != "data_files"}
    out = lm_eval.simple_evaluate(model=lm, tasks=[lm_eval_spec(task)], task_manager=task_manager(),
                                  limit=task.limit, log_samples=True,
                                  confirm_run_unsafe_code=code_execution(task) != "host" or unisolated_permitted(),
                                  bootstrap_iters=0, **options)   # lm-eval logs at our --verbosity (quant/logs.py)
    raw = out["samples"][task.name]
    filters = list(dict.fromkeys(s["filter"] for s in raw))
    names = _metric_names(out["configs"][task.name], filters)
    by_doc: dict[int, dict] = {}
    for s in raw:  # one logged sample per document and filter
        record = by_doc.setdefault(s["doc_id"], {k: s.get(k) for k in SAMPLE_KEYS} | {
            "prompt": s["arguments"][0][0] if s.get("arguments") else None, "metrics": {}})
        for ours, metric, filter_name in names:
            value = _number(s.get(metric)) if s["filter"] == filter_name else None
            if value is not None:
                record["metrics"][ours] = value
    samples = [by_doc[d] for d in sorted(by_doc)]
    # Items that come in groups (a `group` field on every doc) get a CI that resamples whole groups.
    docs = {s["doc_id"]: s.get("doc") or {} for s in raw}
    groups = [docs[r["doc_id"]].get("group") for r in samples]
    groups = groups if all(g is not None for g in groups) else None
    for record, group in zip(samples, groups or []):
        record["group"] = group   # the gate's paired interval resamples whole groups too
    scored = [ours for ours, _, _ in names if all(ours in r["metrics"] for r in samples)]
    direction = _directions(out["configs"][task.name])
    summary = {m: mean_ci([r["metrics"][m] for r in samples], groups) | direction.get(m.split(",")[0], {})
               for m in scored}
    summary["primary"] = primary_metric(task.name, scored)
    return summary, samples


def write_samples(path: Path, samples: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with tmp.open("w") as f:
        for s in samples:
            f.write(json.dumps(s, default=str) + "\n")
    tmp.replace(path)
