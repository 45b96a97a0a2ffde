"""Is this a quant-suite results.json? One check used by gate, choose, compare, report and history, so a
file of another tool or a damaged one is one clear error line (exit 2), never a traceback or a verdict."""

from __future__ import annotations

import json
import math
from pathlib import Path

LATENCIES = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")


class ResultsError(ValueError):
    """Not a usable results.json; the message starts with where (a path, or a history run id)."""


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_accuracy(task: str, entry, at: str) -> str | None:
    where = f"{at}.accuracy.{task}"
    if not isinstance(entry, dict):
        return f"{where} is not a mapping"
    if not isinstance(entry.get("metric"), str):
        return f"{where}.metric is missing or not a name"
    if not _number(entry.get("value")):
        return f"{where}.value is {entry.get('value')!r}, not a finite number"
    n = entry.get("n")
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        return f"{where}.n is {n!r}, not a count"
    ci = entry.get("ci95")
    if not (isinstance(ci, list) and len(ci) == 2 and all(map(_number, ci))):
        return f"{where}.ci95 is {ci!r}, not two finite numbers"
    return None


def _check_point(point, at: str) -> str | None:
    if not isinstance(point, dict):
        return f"{at} is not a mapping"
    for key in ("output_tokens_per_s", "concurrency", "n", "errors"):
        if key in point and point[key] is not None and not _number(point[key]):
            return f"{at}.{key} is {point[key]!r}, not a finite number"
    for key in LATENCIES:
        stats = point.get(key)
        if stats is None:
            continue
        if not isinstance(stats, dict) or any(v is not None and not _number(v) for v in stats.values()):
            return f"{at}.{key} is not a mapping of finite numbers"
    return None


def _check_variant(name: str, v) -> str | None:
    at = f"variants.{name}"
    if not isinstance(v, dict):
        return f"{at} is not a mapping"
    if not isinstance(v.get("status"), str):
        return f"{at}.status is missing"
    if not isinstance(v.get("accuracy", {}), dict) or not isinstance(v.get("perf", {}), dict):
        return f"{at}: accuracy and perf must be mappings"
    for task, entry in v.get("accuracy", {}).items():
        if problem := _check_accuracy(task, entry, at):
            return problem
    for workload, result in v.get("perf", {}).items():
        points = result.get("points") if isinstance(result, dict) else None
        if not isinstance(points, list):
            return f"{at}.perf.{workload}.points is missing or not a list"
        for i, point in enumerate(points):
            if problem := _check_point(point, f"{at}.perf.{workload}.points[{i}]"):
                return problem
    return None


def validate_results(data, where: str) -> dict:
    """The data, if it has a quant-suite results.json's shape; else ResultsError naming what is wrong."""
    if not isinstance(data, dict):
        raise ResultsError(f"{where}: not a quant-suite results.json (the top level is a {type(data).__name__})")
    if "variants" not in data or "baseline" not in data:
        if "results" in data and ("configs" in data or "versions" in data):
            raise ResultsError(f"{where}: an lm-eval results file: `quant gate` takes its directory (with the "
                               f"--log_samples samples files); other commands need a `quant sweep` results.json")
        raise ResultsError(f"{where}: not a quant-suite results.json: no 'variants' and 'baseline' (expected a "
                           f"`quant sweep` results.json)")
    variants = data["variants"]
    if not isinstance(variants, dict) or not variants:
        raise ResultsError(f"{where}: 'variants' is empty or not a mapping")
    if data["baseline"] not in variants:
        raise ResultsError(f"{where}: baseline {data['baseline']!r} is not one of its variants "
                           f"({', '.join(map(str, variants))})")
    for name, v in variants.items():
        if problem := _check_variant(name, v):
            raise ResultsError(f"{where}: {problem}")
    if not isinstance(data.get("recipe", {}), dict):
        raise ResultsError(f"{where}: 'recipe' is not a mapping")
    return data


def read_results(path: Path | str) -> dict:
    """A run directory or results.json -> its validated contents."""
    path = Path(path)
    if path.is_dir():
        path = path / "results.json"
    if not path.is_file():
        raise ResultsError(f"{path}: no such file")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path}: cannot read ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    return validate_results(data, str(path))
