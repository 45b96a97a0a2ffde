"""report.html: self-contained (plot embedded as base64), readable without a server. It opens with the verdict
(reports/summary.py); every table sits in a scroll container and its cells wrap, so the page fits a laptop
window and a phone scrolls a table sideways rather than the page."""

from __future__ import annotations

import base64
from pathlib import Path

from core.foreign_text import html_text
from core.results import Results
from reports.flips_html import anchor, flips_section
from reports.markdown import (ACCURACY_HEADERS, CHECKPOINT_HEADERS, FOREIGN_LOAD_FOOTNOTE,
                              PERF_HEADERS, PLACEMENT_HEADERS, accuracy_cells, by_accuracy, checkpoint_rows, legend,
                              model_notes, p99_unreliable, perf_cells, placement_rows)
from reports.not_measurable import TITLE as NOT_MEASURABLE, not_measurable_lines
from reports.summary import Summary, summarize
from reports.table import metric_of, rows_for_task, tasks_of, variant_rows

STYLE = """body{font-family:system-ui,sans-serif;margin:1rem 2rem;color:#222;max-width:100%}
h1,p,li,summary{overflow-wrap:anywhere}h1{margin:.5rem 0}.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;margin:.5rem 0 1rem}
td,th{border:1px solid #ccc;padding:.25rem .45rem;text-align:right;font-size:.9rem;vertical-align:top}
td:nth-child(2),th:nth-child(2){text-align:left;overflow-wrap:break-word}
table.verdict td,table.verdict th{text-align:left;overflow-wrap:break-word}
code.cmd{font-size:.8rem;overflow-wrap:anywhere}
tr.pareto{background:#eefbe9}.bad{color:#b00}.warn{color:#a60}.pass{color:#070}img{max-width:100%}
@media (max-width:600px){body{margin:.5rem}}"""
# Text glyphs every system font has (colour emoji are missing from many Linux installs).
OUTCOME_MARK = {"pass": "✓", "regression": "✗", "inconclusive": "?", "cannot be deployed": "✗",
                "cannot gate": "?", "baseline": ""}
OUTCOME_CLASS = {"pass": "pass", "regression": "bad", "inconclusive": "warn", "cannot be deployed": "bad",
                 "cannot gate": "warn", "baseline": ""}

e = html_text


def _table(headers, rows: list[list[tuple[str, str]]], cls: str = "", row_classes: list[str] | None = None) -> str:
    """A table in its scroll container; each cell a (class, already escaped html) pair."""
    row_classes = row_classes or [""] * len(rows)
    head = "<tr>" + "".join(f"<th>{e(h)}</th>" for h in headers) + "</tr>"
    body = "".join(f"<tr class='{rc}'>" + "".join(f"<td class='{c}'>{text}</td>" for c, text in row) + "</tr>"
                   for rc, row in zip(row_classes, rows))
    return f"<div class='scroll'><table class='{cls}'>{head}{body}</table></div>"


def _plain(cells: list[str]) -> list[tuple[str, str]]:
    return [("", e(str(c))) for c in cells]


def verdict_section(summary: Summary, baseline: str, flips: str = "") -> str:
    """flips: the flipped-items section, whose per-variant anchors the variant names link to."""
    name = lambda v: f"<a href='#{anchor(v)}'>{e(v)}</a>" if f"id='{anchor(v)}'" in flips else e(v)
    gates = [[("", name(g.variant)), (OUTCOME_CLASS[g.outcome], f"{OUTCOME_MARK[g.outcome]} {e(g.outcome)}".strip()),
              ("", e(g.deciding))] for g in summary.gates]
    parts = ["<section id='verdict'><h2>Verdict</h2>",
             f"<p><code>quant gate</code> against <b>{e(baseline)}</b> ({e(summary.policy)}):</p>",
             _table(("variant", "gate", "deciding check"), gates, "verdict")]
    if summary.picks:
        picks = [[("", e(p.task)), ("", f"<b>{e(p.variant)}</b>" if p.variant else "nothing"), ("", e(p.why)),
                  ("", f"<code class='cmd'>{e(p.command)}</code>" if p.command else "-"),
                  ("", f"<code class='cmd'>{e(p.export)}</code>" if p.export else "-")] for p in summary.picks]
        parts += ["<p><code>quant choose</code> per task (highest output tokens/s within the policy's drop):</p>",
                  _table(("task", "deploy", "why", "serve command", "export with a model card"), picks,
                         "verdict")]
    return "".join(parts) + "</section>"


def _accuracy_row(r) -> list[tuple[str, str]]:
    cells = _plain(accuracy_cells(r))
    if r.delta is not None and r.delta < -0.02:
        cells[3] = ("bad", cells[3][1])
    if r.status != "ok":
        cells[-1] = ("warn", cells[-1][1])
    return cells


def _perf_row(r) -> list[tuple[str, str]]:
    cells = _plain(perf_cells(r, "*"))
    if r.foreign_cores is not None:   # output tok/s measured under foreign load
        cells[1] = ("warn", cells[1][1])
    return cells


def render_html(results: Results, png: Path | None, run_dir: Path | None = None,
                context_png: Path | None = None, history_png: Path | None = None) -> str:
    name = e(str(results.recipe_name))
    flips = flips_section(results, run_dir)
    parts = [f"<!doctype html><meta charset='utf-8'><meta name='viewport' content='width=device-width, "
             f"initial-scale=1'><title>{name} — quant-suite</title><style>{STYLE}</style><h1>{name}</h1>",
             verdict_section(summarize(results, run_dir), results.baseline, flips),
             f"<details class='legend'><summary>How to read the tables</summary><p>Model "
             f"<code>{e(str(results.model))}</code>, baseline <b>{e(results.baseline)}</b>. "
             f"{e(legend(results)).replace('*', '').replace('★ =', '★ and green rows:')} "
             f"A p99 marked * rests on fewer than 100 requests.</p></details>"]
    parts += [f"<p>{e(note.replace('**', ''))}</p>" for note in model_notes(results) if note]
    if png and png.exists():
        data = base64.b64encode(png.read_bytes()).decode()
        parts.append(f"<img alt='accuracy vs throughput' src='data:image/png;base64,{data}'>")
    for task in tasks_of(results):
        rows = by_accuracy(rows_for_task(results, task, run_dir))
        parts.append(f"<section class='task'><h2>{e(task)} ({e(metric_of(results, task))})</h2>"
                     + _table(ACCURACY_HEADERS, [_accuracy_row(r) for r in rows], "accuracy",
                              ["pareto" if r.pareto else "" for r in rows]) + "</section>")
    if context_png and context_png.exists():
        data = base64.b64encode(context_png.read_bytes()).decode()
        parts.append(f"<section id='context'><h2>Accuracy by context length</h2><img alt='accuracy vs context "
                     f"length' src='data:image/png;base64,{data}'></section>")
    rows = variant_rows(results)
    parts.append("<section id='perf'><h2>Performance and memory</h2>"
                 + _table(PERF_HEADERS, [_perf_row(r) for r in rows], "perf")
                 + ("<p>* p99 from fewer than 100 requests.</p>" if any(map(p99_unreliable, rows)) else "")
                 + (f"<p>{e(FOREIGN_LOAD_FOOTNOTE.replace('`', ''))}</p>"
                    if any(r.foreign_cores is not None for r in rows) else "")
                 + "</section>")
    if history_png and history_png.exists():
        data = base64.b64encode(history_png.read_bytes()).decode()
        parts.append("<section id='perf-history'><h2>Performance over time</h2><p>Headline output tokens/s of "
                     "each variant in the earlier runs of the same checkpoint, engine configuration and hardware "
                     "(from the run history) and in this run; hollow: measured under foreign load.</p><img "
                     f"alt='output tokens/s over time' src='data:image/png;base64,{data}'></section>")
    parts.append("<h2>Checkpoints</h2>" + _table(CHECKPOINT_HEADERS, [_plain(row) for row in checkpoint_rows(results)]))
    if placements := placement_rows(results):
        parts.append("<h2>Where perf was measured</h2>" + _table(PLACEMENT_HEADERS, [_plain(r) for r in placements]))
    parts.append(flips)
    if unmeasured := not_measurable_lines(results):
        parts.append(f"<h2>{NOT_MEASURABLE}</h2><ul>"
                     + "".join(f"<li><b>{e(n)}</b> — {e(what)}</li>" for n, what in unmeasured) + "</ul>")
    failures = [(n, v) for n, v in results.variants.items() if not v.ok]
    if failures:
        parts.append("<h2>Variants not fully measured</h2><ul>"
                     + "".join(f"<li><b>{e(n)}</b> — {e(v.status)}: {e(str(v.reason))}</li>" for n, v in failures)
                     + "</ul>")
    return "\n".join(parts)
