"""Run an lm-eval task on a backend LM; keep every per-sample record and summarise with CIs."""

from __future__ import annotations

import math
from pathlib import Path

from evals import item_errors
from evals.registry import code_execution, lm_eval_spec, task_manager
from evals.task_facts import primary_metric
from evals.sandbox import unisolated_permitted
from evals.stats import mean_ci

SAMPLE_KEYS = ("doc_id", "target", "resps", "doc_hash", "prompt_hash", "target_hash")


def _metric_names(config: dict, filters: list[str]) -> list[tuple[str, str, str]]:
    """(summary name, lm-eval's metric, filter): the summary (results.json) names a metric plainly unless the
    task has several filters; per-item records always use lm-eval's "metric,filter"."""
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


def evaluate_task(lm, task, lm_eval_dir: Path | None = None,
                  model_name: str = "quant-suite") -> tuple[dict, list[dict]]:
    """task: a recipe Task. -> (summary, samples). summary: {metric: {value, n, ci95}, "primary": name}.
    With lm_eval_dir, also writes lm-eval's own output files there (evals.lm_eval_output)."""
    import lm_eval

    from evals import lm_eval_output

    item_errors.take()   # what an earlier, interrupted run left
    tracker = lm_eval_output.tracker(lm_eval_dir) if lm_eval_dir is not None else None
    options = {k: v for k, v in task.lm_eval_options().items() if k != "data_files"}

    def run():
        return lm_eval.simple_evaluate(model=lm, tasks=[lm_eval_spec(task)], task_manager=task_manager(task.name),
                                       limit=task.limit, log_samples=True,
                                       confirm_run_unsafe_code=code_execution(task) != "host" or unisolated_permitted(),
                                       bootstrap_iters=0, evaluation_tracker=tracker,
                                       **options)   # lm-eval logs at our --verbosity (quant/logs.py)
    if task.sampled:
        from evals.sampled_runner import evaluate_sampled
        summary, samples, out = evaluate_sampled(lm, task, run, summarise)
    else:
        out = run()
        summary, samples = summarise(out["samples"][task.name], out["configs"][task.name], task.name,
                                     scoring_errors=item_errors.take())
    if tracker is not None:
        lm_eval_output.save(tracker, out, model_name)
    return summary, samples


def _prompt(sample: dict) -> str | None:
    """The first request's context, as simple_evaluate logs it or as lm-eval's samples file stores it."""
    args = sample.get("arguments")
    if isinstance(args, dict):   # samples_<task>_<ts>.jsonl: {"gen_args_0": {"arg_0": context, ...}}
        return (args.get("gen_args_0") or {}).get("arg_0")
    return args[0][0] if args else None


def _gold_continuation(sample: dict) -> str | None:
    """A multiple-choice item's right continuation (what KL teacher-forces there), else None."""
    args, target = sample.get("arguments"), sample.get("target")
    if not isinstance(target, int) or isinstance(target, bool) or not args or not 0 <= target < len(args):
        return None
    if isinstance(args, dict):
        args = [args[k] for k in sorted(args, key=lambda k: int(k.rsplit("_", 1)[-1]))]
        pair = (args[target].get("arg_0"), args[target].get("arg_1"))
    else:
        pair = args[target]
    return pair[1] if len(pair) == 2 and isinstance(pair[1], str) else None


def summarise(raw: list[dict], config: dict, task_name: str,
              scoring_errors: dict[str, str] | None = None) -> tuple[dict, list[dict]]:
    """lm-eval's logged samples (one per document and filter) -> (summary, one record per document).
    scoring_errors: doc_hash -> why that item's scoring raised (evals/item_errors.py), kept in its record."""
    filters = list(dict.fromkeys(s["filter"] for s in raw))
    names = _metric_names(config, filters)
    by_doc: dict[int, dict] = {}
    for s in raw:  # one logged sample per document and filter
        record = by_doc.setdefault(s["doc_id"], {k: s.get(k) for k in SAMPLE_KEYS} | {
            "prompt": _prompt(s), "filtered_resps": {}, "metrics": {}})
        if scoring_errors and s.get("doc_hash") in scoring_errors:
            record["scoring_error"] = scoring_errors[s["doc_hash"]]
        if (gold := _gold_continuation(s)) is not None:
            record["gold_continuation"] = gold
        record["filtered_resps"][s["filter"]] = s.get("filtered_resps")
        for _, metric, filter_name in names:
            value = _number(s.get(metric)) if s["filter"] == filter_name else None
            if value is not None:
                record["metrics"][f"{metric},{filter_name}"] = value
    samples = [by_doc[d] for d in sorted(by_doc)]
    # Items that come in groups (a `group` field on every doc) get a CI that resamples whole groups.
    docs = {s["doc_id"]: s.get("doc") or {} for s in raw}
    groups = [docs[r["doc_id"]].get("group") for r in samples]
    groups = groups if all(g is not None for g in groups) else None
    for record, group in zip(samples, groups or []):
        record["group"] = group   # the gate's paired interval resamples whole groups too
    scored = {ours: f"{m},{f}" for ours, m, f in names if all(f"{m},{f}" in r["metrics"] for r in samples)}
    direction = _directions(config)
    summary = {ours: mean_ci([r["metrics"][key] for r in samples], groups) | direction.get(key.split(",")[0], {})
               for ours, key in scored.items()}
    summary["primary"] = primary_metric(task_name, list(scored))
    return summary, samples
