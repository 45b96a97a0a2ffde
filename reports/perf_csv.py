"""runs/<recipe>/perf.csv: one row per variant x workload x level run, for spreadsheets (GuideLLM writes CSV by
default). Columns: variant, status, workload, level_kind, level_value, then the keys of
`vllm bench serve --save-result` (reports/vllm_bench.py maps ours to them), repeat (1 for a level's first run),
the level's dollars per million output tokens where the recipe prices an accelerator-hour, and the level's
figures over its repeats (median and 95% interval, the same on each of its rows). A variant without perf points
(not served, failed) gets one row per workload with its status and empty metrics."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from core.results import Results
from core.run_layout import RunLayout
from core.store import write_text
from perf.repeats import level_key, summarise_levels
from reports.cost import usd_per_million_tokens
from reports.vllm_bench import level_of, vllm_bench_result

ROW_KEYS = ("variant", "status", "workload", "level_kind", "level_value")


def _workload_names(results: dict) -> list[str]:
    names = [w["name"] for w in ((results.get("recipe") or {}).get("perf") or {}).get("workloads") or []]
    for record in results.get("variants", {}).values():
        names += [n for n in (record.get("perf") or {}) if n not in names]
    return names


def perf_rows(results: dict) -> list[dict]:
    document, rows = Results.of(results), []
    for variant, record in results.get("variants", {}).items():
        status = record.get("status")
        for workload in _workload_names(results):
            points = ((record.get("perf") or {}).get(workload) or {}).get("points") or []
            if not points:
                rows.append({"variant": variant, "status": status, "workload": workload})
            # runs made before levels were summarised: from their points (no requests: no one-run interval)
            levels = ((record.get("perf") or {}).get(workload) or {}).get("levels") or summarise_levels(points)
            for point in points:
                kind, value = level_of(point)
                cost = usd_per_million_tokens(document, variant, point.get("output_tokens_per_s"))
                rows.append({"variant": variant, "status": status, "workload": workload, "level_kind": kind,
                             "level_value": value, **vllm_bench_result(results, variant, workload, point),
                             "repeat": point.get("repeat", 0) + 1,
                             **({"usd_per_million_output_tokens": round(cost, 6)} if cost is not None else {}),
                             **_level_columns(levels, point)})
    return rows


def _level_columns(levels: list[dict], point: dict) -> dict:
    """The level's figures over its repeats, repeated on each of its rows: <figure>_median, _ci95_low,
    _ci95_high, and how they were computed (interval_method)."""
    key = level_key(point)
    level = next((lv for lv in levels if level_key(lv) == key), None)
    if level is None:
        return {}
    out = {"level_repeats": level["repeats"], "interval_method": level["method"]}
    for name, figure in level.get("figures", {}).items():
        low, high = (figure.get("ci95") or [None, None])
        out |= {f"{name}_median": figure["median"], f"{name}_ci95_low": low, f"{name}_ci95_high": high}
    return out


def render_perf_csv(results: dict) -> str:
    rows = perf_rows(results)
    columns = list(ROW_KEYS) + [k for row in rows for k in row if k not in ROW_KEYS]
    columns = list(dict.fromkeys(columns))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, restval="", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def write_perf_csv(out: Path, results: dict) -> Path:
    path = RunLayout(Path(out)).perf_csv
    write_text(path, render_perf_csv(results))
    return path
