"""Is this a quant-suite results.json? One check used by gate, choose, compare, report and history, so a
file of another tool, an old one or a damaged one is one clear error line (exit 2), never a traceback or a
verdict. The check is the typed schema (core.results)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from core.results import SCHEMA_VERSION, Results, first_problem
from core.run_layout import RunLayout
from core.safe_paths import UnsafePath, checked_component, checked_name


class ResultsError(ValueError):
    """Not a usable results.json; the message starts with where (a path, or a history run id)."""


def parse_results(data, where: str) -> Results:
    """The document as the typed schema, if it has a quant-suite results.json's shape; else ResultsError."""
    if not isinstance(data, dict):
        raise ResultsError(f"{where}: not a quant-suite results.json (the top level is a {type(data).__name__})")
    if "variants" not in data or "baseline" not in data:
        if "results" in data and ("configs" in data or "versions" in data):
            raise ResultsError(f"{where}: an lm-eval results file: `quant gate` takes its directory (with the "
                               f"--log_samples samples files); other commands need a `quant sweep` results.json")
        raise ResultsError(f"{where}: not a quant-suite results.json: no 'variants' and 'baseline' (expected a "
                           f"`quant sweep` results.json)")
    try:
        results = Results.model_validate(data)
        _check_names(data)
    except ValidationError as exc:
        raise ResultsError(f"{where}: {first_problem(exc)}") from None
    except UnsafePath as exc:
        raise ResultsError(f"{where}: {exc}") from None
    if problem := results.usable():
        raise ResultsError(f"{where}: {problem}")
    return results


def _check_names(data: dict) -> None:
    """The names that become paths under the run (variants, their tasks and workloads) are names a sweep writes."""
    for name, record in (data.get("variants") or {}).items():
        checked_name(name, "variant")
        for inner in (record.get("accuracy") or {}) if isinstance(record, dict) else ():
            checked_component(inner, "task")
        for inner in (record.get("perf") or {}) if isinstance(record, dict) else ():
            checked_name(inner, "workload")


def validate_results(data, where: str) -> dict:
    """The data itself, if it has a results.json's shape (a document built in memory needs no version)."""
    parse_results(data, where)
    return data


def check_version(data: dict, where: str) -> None:
    """A stored document must name the schema it was written in, and one this code reads."""
    version = data.get("schema_version") if isinstance(data, dict) else None
    if isinstance(data, dict) and "variants" in data and "baseline" in data and version is None:
        raise ResultsError(f"{where}: written before results.json had a schema_version; re-run `quant sweep` on "
                           f"its recipe to rewrite it (finished stages come from the cache)")
    if version is not None and version != SCHEMA_VERSION:
        raise ResultsError(f"{where}: schema_version {version!r}; this quant-suite reads version {SCHEMA_VERSION}")


def validate_stored(data, where: str) -> dict:
    """validate_results for a document read from disk or the history: its schema_version is checked too."""
    check_version(data, where)
    return validate_results(data, where)


def _load(path: Path | str) -> tuple[dict, Path]:
    path = Path(path)
    if path.is_dir():
        path = RunLayout(path).results
    if not path.is_file():
        raise ResultsError(f"{path}: no such file")
    try:
        return json.loads(path.read_text()), path
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path}: cannot read ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except RecursionError:
        raise ResultsError(f"{path}: not valid JSON (nested too deeply)") from None


def read_results(path: Path | str) -> dict:
    """A run directory or results.json -> its validated contents."""
    data, path = _load(path)
    return validate_stored(data, str(path))


def load_results(path: Path | str) -> Results:
    """A run directory or results.json -> the typed document."""
    data, path = _load(path)
    check_version(data, str(path))
    return parse_results(data, str(path))
