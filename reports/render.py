"""Write every report for a run directory from its results.json (no recomputation)."""

from __future__ import annotations

from pathlib import Path

from core.results import Results
from core.run_layout import RunLayout
from core.store import write_text
from reports.html import render_html
from reports.markdown import render_markdown
from reports.perf_csv import write_perf_csv
from reports.plots import render_pareto_png
from reports.vllm_bench import write_vllm_bench


def render_all(out: Path, results: dict) -> list[Path]:
    out = Path(out)
    layout = RunLayout(out)
    md, png, page = layout.pareto_md, layout.pareto_png, layout.report_html
    document = Results.of(results)
    write_text(md, render_markdown(document, out))
    render_pareto_png(document, png)
    write_text(page, render_html(document, png, out))
    return [md, png, page, write_perf_csv(out, results), *write_vllm_bench(out, results)]
