"""Every sweep recorded in a local SQLite database: `quant history` lists runs, `quant compare` diffs two."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from core.results import Results
from reports.results_file import check_version, parse_results

SCHEMA = """CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, recipe_name TEXT, recipe_hash TEXT, model TEXT, git_commit TEXT,
    started TEXT, finished TEXT, run_dir TEXT, results TEXT)"""


def db_path() -> Path:
    return Path(os.environ.get("QUANT_HISTORY_DB", Path.home() / ".cache" / "quant-suite" / "history.sqlite"))


@contextmanager
def _connect() -> Iterator[sqlite3.Connection]:
    """A connection that commits on success and is always closed."""
    path = db_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    try:
        with con:
            con.execute(SCHEMA)
            yield con
    finally:
        con.close()


def git_commit(where: Path) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def record(results: Results | dict, run_dir: Path, recipe_path: Path) -> str:
    results = Results.of(results).dump()
    run_id = f"{results['started'].replace(':', '').replace('-', '')[:15]}-{results['recipe_hash'][:8]}"
    with _connect() as con:
        con.execute("INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (run_id, results["recipe_name"], results["recipe_hash"], results["model"],
                     git_commit(recipe_path.resolve().parent), results["started"], results.get("finished"),
                     str(run_dir.resolve()), json.dumps(results)))
    return run_id


def runs(limit: int = 20, recipe: str | None = None) -> list[dict]:
    query = "SELECT run_id, recipe_name, model, git_commit, started, run_dir, results FROM runs"
    args: tuple = ()
    if recipe:
        query, args = query + " WHERE recipe_name = ?", (recipe,)
    with _connect() as con:
        rows = con.execute(query + " ORDER BY started DESC LIMIT ?", args + (limit,)).fetchall()
    keys = ("run_id", "recipe_name", "model", "git_commit", "started", "run_dir", "results")
    return [dict(zip(keys, row)) | {"results": json.loads(row[-1])} for row in rows]


def _same_run(run_dir: Path, data: dict) -> bool:
    """The recorded run directory still holds this run (a later sweep into it would pair other items)."""
    try:
        return json.loads((run_dir / "results.json").read_text()).get("started") == data.get("started")
    except (OSError, ValueError):
        return False


def load_side(ref: str) -> tuple[dict, str | None]:
    """A side of `quant compare`: what `quant gate` takes (run dir, results.json, lm-eval output directory, URL,
    each with an optional :VARIANT), or a run id (or unique prefix) from the history, optionally :VARIANT."""
    from core.remote import is_url
    from reports.gate import load_side as gate_side

    head, _, variant = ref.rpartition(":")
    if is_url(ref) or Path(ref).exists() or (head and Path(head).exists()):
        return gate_side(ref)
    run_id, variant = (head, variant) if head else (ref, None)
    with _connect() as con:
        rows = con.execute("SELECT run_id, run_dir, results FROM runs WHERE run_id LIKE ?", (run_id + "%",)).fetchall()
    if len(rows) != 1:
        raise LookupError(f"{ref}: {'no run' if not rows else 'several runs'} with that id in {db_path()} "
                          f"and no such path")
    (_, run_dir, text), where = rows[0], f"history run {rows[0][0]}"
    data = json.loads(text)
    check_version(data, where)
    data = parse_results(data, where).dump()   # the typed schema's checks, as for a results.json
    recorded = run_dir if run_dir and _same_run(Path(run_dir), data) else None   # its per-item files: the paired CI
    return data | {"_run_dir": recorded, "_path": where}, variant


def _recorded(before: str | None = None) -> Iterator[tuple[str, Results]]:
    """(run id, typed results) of every recorded run, oldest first (only those started before `before`); a
    row that no longer parses is left out."""
    query, args = "SELECT run_id, results FROM runs", ()
    if before is not None:
        query, args = query + " WHERE started < ?", (before,)
    with _connect() as con:
        rows = con.execute(query + " ORDER BY started", args).fetchall()
    for run_id, text in rows:
        try:
            yield run_id, parse_results(json.loads(text), f"history run {run_id}")
        except ValueError:
            continue


def earlier_perf(identity: dict, before: str, window: int, measured: list[str] | None = None) -> list[dict]:
    """The last `window` runs recorded before `before` with a variant of this perf identity
    (reports/perf_history.py), oldest first. Each measurement counts once, where it was first recorded: a
    re-run that took its perf from the stage cache is not another sample, nor is a run's own measurement
    (`measured`) its own baseline."""
    from reports.perf_history import perf_entry

    found, seen = [], [measured] if measured else []
    for _, results in _recorded(before):
        for name in results.variants:
            entry = perf_entry(results, name)
            if entry is None or entry["identity"] != identity:
                continue
            if entry["measured"] and entry["measured"] in seen:
                continue
            seen.append(entry["measured"])
            found.append(entry)
    return found[-window:]


def perf_over_time(variant: str, recipe: str | None = None) -> list[dict]:
    """A variant's headline perf in every recorded run that has it, oldest first. A run that took its perf from
    the stage cache (an unchanged re-run) has `same_as`: the run that measured it."""
    from reports.perf_history import perf_entry
    from reports.headline import headline_figure

    rows, first_run = [], {}
    for run_id, results in _recorded():
        if variant not in results.variants or (recipe and results.recipe_name != recipe):
            continue
        entry = perf_entry(results, variant)
        if entry is not None:
            _, ci, repeats = headline_figure(results.variants[variant], "output_tokens_per_s")
            measured = tuple(entry["measured"] or ())
            first = first_run.setdefault(measured, run_id) if measured else run_id
            rows.append(entry | {"run_id": run_id, "ci95": ci, "repeats": repeats,
                                 "same_as": None if first == run_id else first})
    return rows


def write_perf_history(out: Path, results: Results | dict, window: int = 20) -> Path | None:
    """perf-history.json in the run directory, for report.html's plot: per variant with earlier runs of the
    same perf identity in the history, those runs (the last `window`) and this one; removed where none has
    any. A history that cannot be read leaves the report without the plot."""
    from core.run_layout import RunLayout
    from reports.perf_history import perf_entry
    from reports.headline import headline_figure

    results = Results.of(results)
    path = RunLayout(Path(out)).perf_history
    series = {}
    try:
        for name, v in results.variants.items():
            entry = perf_entry(results, name)
            if entry is None or not results.started:
                continue
            earlier = earlier_perf(entry["identity"], results.started, window, entry["measured"])
            if earlier:
                ci = headline_figure(v, "output_tokens_per_s")[1]
                series[name] = [{k: e[k] for k in ("started", "version", "tok_s", "foreign")} for e in earlier] \
                    + [{k: entry[k] for k in ("started", "version", "tok_s", "foreign")} | {"ci95": ci}]
    except (OSError, sqlite3.Error):
        series = {}
    if not series:
        path.unlink(missing_ok=True)
        return None
    path.write_text(json.dumps(series, indent=1))
    return path
