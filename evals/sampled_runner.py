"""A sampled task's run (a task's `repeats`, or `reasoning`): lm-eval runs it once per repeat, the backend seeding
each request from its item and repeat and removing the reasoning trace from each answer; the repeats' records
merge into one per item (evals/sampling.py), and lm-eval's own output is rewritten to match."""

from __future__ import annotations

import copy
import logging

from evals.backends.served import NotMeasurable
from evals.sampling import merge_records, sampled_summary
from evals.stats import mean_ci


def _record_key(metrics: dict, ours: str) -> str | None:
    """The per-item key ("metric,filter") of a summary's metric name."""
    return ours if ours in metrics else next((k for k in metrics if k.split(",")[0] == ours), None)


def _run_repeats(lm, task, run, summarise) -> tuple[list[dict], list[dict], list[list[dict]]]:
    """Each repeat's (simple_evaluate output, summary, per-item records with the answers' traces)."""
    outs, summaries, per_repeat = [], [], []
    lm.reasoning = task.reasoning
    evaluator_log = logging.getLogger("lm_eval.evaluator")
    level = evaluator_log.level
    try:
        for repeat in range(task.repeats):
            lm.repeat, lm.traces = (repeat if task.repeats > 1 else None), {}
            if repeat == 1:   # lm-eval's warnings about the task's settings: once, not K times
                evaluator_log.setLevel(logging.ERROR)
            out = run()
            summary, records = summarise(out["samples"][task.name], out["configs"][task.name], task.name)
            for record in records:
                if (trace := lm.traces.get(record["doc_id"])) is not None:
                    record["reasoning"], record["reasoning_cut"] = trace.reasoning, trace.cut
            outs.append(out)
            summaries.append(summary)
            per_repeat.append(records)
    finally:
        lm.repeat, lm.reasoning = None, None
        evaluator_log.setLevel(level)
    if any([r["doc_id"] for r in records] != [r["doc_id"] for r in per_repeat[0]] for records in per_repeat):
        raise RuntimeError(f"{task.key}: the repeats scored different items")
    return outs, summaries, per_repeat


def evaluate_sampled(lm, task, run, summarise) -> tuple[dict, list[dict], dict]:
    """-> (summary, one record per item with every sample, lm-eval's output for all repeats)."""
    if not hasattr(lm, "repeat"):
        raise NotMeasurable(f"{task.key}: repeats and reasoning need the served backend (the in-process one "
                            "decodes greedily and has no trace to separate)")
    outs, summaries, per_repeat = _run_repeats(lm, task, run, summarise)
    first = per_repeat[0][0] if per_repeat[0] else {"filtered_resps": {}, "metrics": {}}
    primary = summaries[0]["primary"]
    primary_key = _record_key(first["metrics"], primary)
    merged = merge_records(per_repeat, list(first["filtered_resps"]), primary_key)
    groups = [r["group"] for r in merged] if merged and all("group" in r for r in merged) else None
    summary = {}
    for ours, entry in summaries[0].items():
        if ours != "primary":
            key = _record_key(merged[0]["metrics"], ours)
            direction = {k: entry[k] for k in ("higher_is_better", "aggregation") if k in entry}
            summary[ours] = mean_ci([r["metrics"][key] for r in merged], groups) | direction
    summary["primary"] = primary
    if primary_key is not None:
        summary["sampling"] = sampled_summary(merged, primary_key, task.repeats, groups)
    return summary, merged, lm_eval_out(outs, merged, task.name, summary.get("sampling"))


def lm_eval_out(outs: list[dict], merged: list[dict], task_name: str, sampling: dict | None) -> dict:
    """The first repeat's simple_evaluate output with every repeat's answers per logged sample (lm-eval's shape
    for repeats), each metric the item's mean over its samples, and the sampled metrics among the results."""
    out = copy.deepcopy(outs[0])
    by_doc = {r["doc_id"]: r for r in merged}
    for logged in out["samples"][task_name]:
        record, filter_name = by_doc[logged["doc_id"]], logged["filter"]
        logged["resps"] = record["resps"]
        logged["filtered_resps"] = record["filtered_resps"].get(filter_name)
        for key, value in record["metrics"].items():
            metric, _, where = key.partition(",")
            if where == filter_name and metric in logged:
                logged[metric] = value
        if "reasoning" in record:
            logged["reasoning"], logged["reasoning_cut"] = record["reasoning"], record["reasoning_cut"]
    results = out["results"][task_name]
    for key in list(results):
        metric, _, filter_name = key.partition(",")
        values = [r["metrics"][key] for r in merged if key in r["metrics"]]
        if values and not metric.endswith("_stderr"):
            results[key] = sum(values) / len(values)
    if sampling:
        _, _, filter_name = sampling["metric"].partition(",")
        suffix = f",{filter_name or 'none'}"
        k = sampling["repeats"]
        results[f"avg@{k}{suffix}"] = sampling["avg"]["value"]
        for n, value in sampling.get("pass_at", {}).items():
            results[f"pass@{n}{suffix}"] = value
        if "majority" in sampling:
            results[f"maj@{k}{suffix}"] = sampling["majority"]["value"]
        results[f"no_answer_rate{suffix}"] = sampling["no_answer"]["value"]
    return out
