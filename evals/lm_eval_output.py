"""What `lm_eval --output_path DIR --log_samples` writes, written by lm-eval's own EvaluationTracker:
DIR/<model_name_sanitized>/results_<timestamp>.json and samples_<task>_<timestamp>.jsonl."""

from __future__ import annotations

import copy
from pathlib import Path


def tracker(output_dir: Path):
    from lm_eval.loggers import EvaluationTracker

    return EvaluationTracker(output_path=str(output_dir))


def save(tracker, out: dict, model_name: str) -> list[Path]:
    """Write simple_evaluate's output (run with log_samples and this tracker) as the lm-eval CLI does. The
    tracker rewrites the samples it saves, so it gets a copy. -> the files written."""
    from lm_eval.utils import sanitize_model_name

    config = tracker.general_config_tracker
    config.model_name, config.model_name_sanitized = model_name, sanitize_model_name(model_name)
    samples = copy.deepcopy(out["samples"])
    results = {k: copy.deepcopy(v) for k, v in out.items() if k != "samples"}
    tracker.save_results_aggregated(results=results, samples=samples)
    for task_name in results["configs"]:
        tracker.save_results_samples(task_name=task_name, samples=samples[task_name])
    written = sorted((Path(tracker.output_path) / config.model_name_sanitized).glob(f"*_{tracker.date_id}*.json*"))
    if len(written) != 1 + len(results["configs"]):   # the tracker logs its own failures and carries on
        raise RuntimeError(f"lm-eval's EvaluationTracker wrote {len(written)} files, expected "
                           f"{1 + len(results['configs'])}")
    return written
