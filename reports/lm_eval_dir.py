"""An lm-eval output directory (`lm_eval --output_path DIR --log_samples`, or a sweep's variants/<v>/lm_eval)
as a one-variant quant-suite run, so the gate can take it as either side."""

from __future__ import annotations

import json
from pathlib import Path

from reports.results_file import ResultsError


def results_files(path: Path) -> list[Path]:
    """lm-eval's results_<ts>.json in path or its model-name subdirectories (its --output_path layout)."""
    path = Path(path)
    if path.is_file():
        return [path] if path.name.startswith("results_") and path.suffix == ".json" else []
    if not path.is_dir():
        return []
    found = sorted(path.glob("results_*.json"))
    return found or sorted(path.glob("*/results_*.json"))


def _load(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsError(f"{path}: cannot read as JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), dict) \
            or not isinstance(data.get("configs"), dict):
        raise ResultsError(f"{path}: not an lm-eval results file (no 'results' and 'configs')")
    return data


def _samples_rows(results_path: Path, task: str) -> list[dict]:
    stamp = results_path.stem.removeprefix("results_")
    path = results_path.parent / f"samples_{task}_{stamp}.jsonl"
    if not path.is_file():
        raise ResultsError(f"{results_path}: no {path.name} beside it (run lm_eval with --log_samples); the "
                           f"gate pairs items and needs every task's samples file")
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsError(f"{path}: cannot read as JSON lines ({exc})") from None


def read_lm_eval_dir(path: Path) -> dict:
    """-> a results.json-shaped dict with one variant (named after lm-eval's model_name) whose tasks come from
    the results files (the newest per task) and per-item records, under "_items", from the samples files."""
    from evals.runner import summarise

    files = results_files(path)
    if not files:
        raise ResultsError(f"{path}: no lm-eval results_<timestamp>.json here or in a subdirectory")
    accuracy, items, name = {}, {}, None
    for file in files:   # oldest first: a newer file's task replaces an older one's
        data = _load(file)
        name = data.get("model_name") or name
        for task, config in data["configs"].items():
            try:
                summary, records = summarise(_samples_rows(file, task), config, task)
            except (KeyError, TypeError, ValueError) as exc:
                if isinstance(exc, ResultsError):
                    raise
                raise ResultsError(f"{file}: {task}: samples not in lm-eval's format ({exc})") from None
            primary = summary.pop("primary")
            accuracy[task] = {"metric": primary, **summary[primary], "metrics": summary, "backend": "lm-eval"}
            items[task] = (file.parent / f"samples_{task}_{file.stem.removeprefix('results_')}.jsonl", records)
    name = str(name or Path(path).name)
    return {"baseline": name, "variants": {name: {"status": "ok", "accuracy": accuracy, "perf": {},
                                                  "_items": items}}}
