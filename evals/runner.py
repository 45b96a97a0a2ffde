"""Run lm-eval tasks on a backend LM; keep every per-sample record and summarise with CIs."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from evals.registry import TASKS_DIR, primary_metric
from evals.stats import mean_ci

SAMPLE_KEYS = ("doc_id", "target", "resps", "filtered_resps")


def _quiet_lm_eval() -> None:
    for name in ("lm-eval", "lm_eval", "datasets", "httpx"):
        logging.getLogger(name).setLevel(logging.ERROR)


def evaluate_task(lm, task: str, limit: int | None = None) -> tuple[dict, list[dict]]:
    """-> (summary, samples). summary: {metric: {value, n, ci95}, "primary": name}."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    _quiet_lm_eval()
    manager = TaskManager(include_path=str(TASKS_DIR), verbosity="ERROR")
    out = lm_eval.simple_evaluate(model=lm, tasks=[task], task_manager=manager, limit=limit, log_samples=True,
                                  confirm_run_unsafe_code=True, bootstrap_iters=0, verbosity="ERROR")
    raw = out["samples"][task]
    metric_names = [entry["metric"] for entry in out["configs"][task].get("metric_list", [])]
    samples = []
    for s in sorted(raw, key=lambda s: s["doc_id"]):
        record = {k: s.get(k) for k in SAMPLE_KEYS}
        record["prompt"] = s["arguments"][0][0] if s.get("arguments") else None
        record["metrics"] = {m: float(s[m]) for m in metric_names if m in s}
        samples.append(record)
    # Items that come in groups (a `group` field on every doc) get a CI that resamples whole groups.
    docs = {s["doc_id"]: s.get("doc") or {} for s in raw}
    groups = [docs[r["doc_id"]].get("group") for r in samples]
    groups = groups if all(g is not None for g in groups) else None
    summary = {m: mean_ci([r["metrics"][m] for r in samples], groups) for m in metric_names}
    summary["primary"] = primary_metric(task, metric_names)
    return summary, samples


def write_samples(path: Path, samples: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with tmp.open("w") as f:
        for s in samples:
            f.write(json.dumps(s, default=str) + "\n")
    tmp.replace(path)
