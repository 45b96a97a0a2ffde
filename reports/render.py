"""Write every report for a run directory from its results.json (no recomputation).

The reports are remembered by what they are rendered from: results.json less what no report shows (when the
run and each variant started and finished, seconds per stage), the per-item files the paired columns read, and the renderers'
own source. An unchanged re-run finds them written and imports neither matplotlib nor scipy."""

from __future__ import annotations

import json
from pathlib import Path

from core.hashing import digest, file_digest, versions
from core.memo import source_digest
from core.run_layout import RunLayout
from core.safe_paths import UnsafePath, inside
from core.store import write_json

RENDERED = ".reports.json"   # in the run directory: the key the reports there were rendered from, and their files


def render_all(out: Path, results: dict) -> list[Path]:
    out = Path(out)
    key = reports_key(out, results)
    written = already_rendered(out, key)
    if written is not None:
        return written
    written = _render(out, results)
    write_json(out / RENDERED, {"key": key, "files": [str(p.relative_to(out)) for p in written]})
    return written


def _render(out: Path, results: dict) -> list[Path]:
    from core.results import Results
    from core.store import write_text
    from reports.context_plot import render_context_png
    from reports.html import render_html
    from reports.markdown import render_markdown
    from reports.next_steps import write_next_steps
    from reports.perf_csv import write_perf_csv
    from reports.plots import render_pareto_png
    from reports.vllm_bench import write_vllm_bench

    layout = RunLayout(out)
    md, png, page = layout.pareto_md, layout.pareto_png, layout.report_html
    document = Results.of(results)
    write_text(md, render_markdown(document, out))
    render_pareto_png(document, png)
    context = render_context_png(document, layout.long_context_png)
    history = None
    if layout.perf_history.is_file():
        from reports.history_plot import render_history_png
        history = render_history_png(layout.perf_history, layout.perf_history_png)
    write_text(page, render_html(document, png, out, context, history))
    return [md, png, *([context] if context else []), *([history] if history else []), page,
            write_perf_csv(out, results),
            *write_vllm_bench(out, results), write_next_steps(out)]


def reports_key(out: Path, results: dict) -> str:
    shown = {k: v for k, v in results.items() if k not in ("started", "finished", "variants")}
    points = [p for v in results.get("variants", {}).values() for w in (v.get("perf") or {}).values()
              for p in (w.get("points") or [])]
    if not all(p.get("started") for p in points):
        shown["started"] = results.get("started")   # vllm-bench files date a point without its own by the run
    variants = {name: {k: v for k, v in record.items() if k != "ran_on"} | {"ran_on": _placement(record)}
                for name, record in results.get("variants", {}).items()}
    items = sorted(p for p in (out / "variants").glob("*/evals/*.jsonl")) if (out / "variants").is_dir() else []
    renderers = sorted(Path(__file__).parent.glob("*.py"))
    history = RunLayout(out).perf_history
    items += [history] if history.is_file() else []   # the history plot's source
    return digest("reports", shown, variants, [(str(p.relative_to(out)), file_digest(p)) for p in items],
                  source_digest(*renderers), versions("matplotlib"))


def _placement(record: dict) -> dict:
    """What a variant's `ran_on` says that a report may show: where, not when nor how long."""
    return {k: v for k, v in (record.get("ran_on") or {}).items() if k not in ("started", "finished", "stages")}


def already_rendered(out: Path, key: str) -> list[Path] | None:
    """The files rendered from `key` when they are all still there, else None."""
    try:
        stamp = json.loads((out / RENDERED).read_text())
    except (OSError, ValueError):
        return None
    try:   # a downloaded run's stamp is not ours: only the run's own files count
        names = stamp.get("files", []) if stamp.get("key") == key else []
        files = [inside(out, name, "a rendered file") for name in names]
    except (UnsafePath, TypeError, AttributeError):
        return None
    return files if files and all(p.is_file() and not p.is_symlink() for p in files) else None
