"""report.html: self-contained (plot embedded as base64), readable without a server."""

from __future__ import annotations

import base64
import html
from pathlib import Path

from core.results import Results
from reports.markdown import (CHECKPOINT_HEADERS, PLACEMENT_HEADERS, checkpoint_rows, mb, num, p99_cell, paired_cell,
                              placement_rows, server_memory, tok_s_cell)
from reports.table import headline_concurrency, memory_target, rows_for_task, tasks_of

STYLE = """body{font-family:system-ui,sans-serif;margin:2rem;color:#222}table{border-collapse:collapse;margin:1rem 0}
td,th{border:1px solid #ccc;padding:.3rem .6rem;text-align:right}td{white-space:nowrap}td:last-child{white-space:normal}td:nth-child(2),th:nth-child(2){text-align:left}
tr.pareto{background:#eefbe9}.bad{color:#b00}.warn{color:#a60}img{max-width:100%}"""


HEADERS = ("", "variant", "accuracy [95% CI]", "Δ vs baseline", "paired Δ [95% CI], lost/gained, p",
           "KL vs baseline", "out tok/s", "TTFT p99 ms", "TPOT p99 ms", "E2E p99 ms", "goodput req/s",
           "max rate meeting SLO", "size", "server memory", "KV bytes/token", "max seqs", "status")


def render_html(results: Results, png: Path | None, run_dir: Path | None = None) -> str:
    e = html.escape
    c = headline_concurrency(results)
    parts = [f"<!doctype html><meta charset='utf-8'><title>{e(str(results.recipe_name))} — quant-suite</title>",
             f"<style>{STYLE}</style><h1>{e(str(results.recipe_name))}</h1>",
             f"<p>Model <code>{e(str(results.model))}</code>, baseline <b>{e(results.baseline)}</b>. "
             f"Perf at concurrency {c}. Green rows are Pareto-optimal (accuracy, output tokens/s, E2E p99 latency, size). "
             f"<i>Paired</i>: difference to the baseline on the same items (95% CI), items lost/gained, "
             f"p of the test the interval inverts (exact McNemar for 0/1 scores, paired t for graded ones, cluster "
             f"bootstrap for grouped items). A p99 marked * rests on fewer than 100 requests; "
             f"out tok/s marked † was measured while other processes took the CPU in brackets (cores). <i>KL</i>: mean KL divergence (nats/token) of next-token distributions from the "
             f"baseline's, on its own answers. <i>Goodput</i>: requests/s meeting every SLO bound; <i>max rate</i>: "
             f"the highest rate a rate search found to meet the SLO. <i>Max seqs</i>: sequences of the first workload's length whose KV cache fits "
             f"beside the weights on {e(memory_target(results))} (activations ignored).</p>"]
    if png and png.exists():
        data = base64.b64encode(png.read_bytes()).decode()
        parts.append(f"<img alt='accuracy vs throughput' src='data:image/png;base64,{data}'>")
    for task in tasks_of(results):
        parts.append(f"<h2>{e(task)}</h2><table><tr>" + "".join(f"<th>{h}</th>" for h in HEADERS) + "</tr>")
        for r in sorted(rows_for_task(results, task, run_dir), key=lambda r: -(r.accuracy or -1)):
            acc = f"{r.accuracy:.3f} [{r.ci95[0]:.3f}, {r.ci95[1]:.3f}]" if r.accuracy is not None else "-"
            status = r.status + (" (in-process eval)" if r.backend == "inprocess" else "")
            cells = [("", "★" if r.pareto else ""), ("", e(r.variant)), ("", acc),
                     ("bad" if r.delta is not None and r.delta < -0.02 else "",
                      "-" if r.delta is None else f"{r.delta:+.3f}"),
                     ("", e(paired_cell(r))), ("", num(r.kl, ".4f")),
                     ("warn" if r.foreign_cores is not None else "", e(tok_s_cell(r))),
                     ("", p99_cell(r, r.ttft_p99_ms, ".1f", "*")), ("", p99_cell(r, r.tpot_p99_ms, ".2f", "*")),
                     ("", p99_cell(r, r.e2e_p99_ms, ".0f", "*")),
                     ("", num(r.goodput_rps, ".1f")), ("", num(r.max_rate_meeting_slo, ".2f")), ("", mb(r.size_bytes)),
                     ("", server_memory(r)), ("", num(r.kv_bytes_per_token, ",d")), ("", num(r.max_sequences, ",d")),
                     ("" if r.status == "ok" else "warn", e(status))]
            parts.append(f"<tr class='{'pareto' if r.pareto else ''}'>"
                         + "".join(f"<td class='{cls}'>{text}</td>" for cls, text in cells) + "</tr>")
        parts.append("</table>")
    parts.append("<h2>Checkpoints</h2><table><tr>" + "".join(f"<th>{e(h)}</th>" for h in CHECKPOINT_HEADERS) + "</tr>")
    parts += ["<tr>" + "".join(f"<td>{e(cell)}</td>" for cell in row) + "</tr>" for row in checkpoint_rows(results)]
    parts.append("</table>")
    if placements := placement_rows(results):
        parts.append("<h2>Where perf was measured</h2><table><tr>"
                     + "".join(f"<th>{e(h)}</th>" for h in PLACEMENT_HEADERS) + "</tr>")
        parts += ["<tr>" + "".join(f"<td>{e(cell)}</td>" for cell in row) + "</tr>" for row in placements]
        parts.append("</table>")
    failures = [(n, v) for n, v in results.variants.items() if not v.ok]
    if failures:
        parts.append("<h2>Variants not fully measured</h2><ul>")
        parts += [f"<li><b>{e(n)}</b> — {e(v.status)}: {e(str(v.reason))}</li>" for n, v in failures]
        parts.append("</ul>")
    return "\n".join(parts)
