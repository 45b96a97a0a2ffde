"""pareto.md: one table per task."""

from __future__ import annotations

from core.foreign_text import markdown_cell
from core.results import Results
from perf.engines.kernels import describe as describe_kernels
from perf.metrics import samples_needed
from reports.headline import failed_note, perf_not_measured
from reports.not_measurable import TITLE as NOT_MEASURABLE, endpoint_cells, not_measurable_lines
from reports.summary import Summary, summarize
from reports import context_plot
from reports.table import headline_concurrency, memory_target, metric_of, rows_for_task, tasks_of, variant_rows


CHECKPOINT_HEADERS = ("variant", "scheme", "format", "bits/weight (quantized · all Linear)", "size",
                      "16-bit modules", "quantized in", "served")


def mb(n: int | None) -> str:
    return f"{n / 1e6:.2f} MB" if n else "-"


def server_memory(r) -> str:
    """RSS, and the device memory the server held where it ran on a GPU."""
    # on a GPU, what the server holds is the pool vLLM preallocated (gpu_memory_utilization), not what it uses
    return mb(r.rss_bytes) + (f" + {r.gpu_bytes / 2**30:.1f} GiB GPU pool" if r.gpu_bytes else "")


def num(x: float | None, fmt: str) -> str:
    return format(x, fmt) if x is not None else "-"


def percent(x: float | None) -> str:
    return f"{x:.1%}" if x is not None else "-"


def paired_cell(r) -> str:
    """Δ against the baseline on the same items: paired 95% CI, items worse/better, and the p of the test about 0
    (exact McNemar for 0/1 items, paired t for graded ones, a cluster t for groups)."""
    if not r.paired:
        return "-"
    p = r.paired
    shown = f" p={p['p']:.2g}" if p.get("p") is not None else ""
    return f"[{p['ci95'][0]:+.3f}, {p['ci95'][1]:+.3f}] −{p['lost']}/+{p['gained']}{shown}"


P99_FOOTNOTE = ("\\* p99 from fewer than 100 requests: an interpolation towards the slowest request, not a 99th "
                "percentile (raise the workload's requests_per_level).")


FOREIGN_LOAD_FOOTNOTE = ("† measured under foreign load: other processes took the CPU shown in brackets (cores, "
                         "averaged over the level) while it ran; its perf may be the machine's, not the variant's, "
                         "and `quant gate` calls its perf checks inconclusive.")


def tok_s_cell(r) -> str:
    """Output tokens/s (the median where the level was repeated) with its 95% interval, marked where a headline
    run was measured under foreign load, with the requests that failed beside it; where every one failed, no
    figure but that."""
    if perf_not_measured(r.failed):
        return f"not measurable: all {r.failed[1]:,} requests failed"
    ci = f" [{r.tok_s_ci[0]:.0f}, {r.tok_s_ci[1]:.0f}]" if r.tok_s_ci and r.out_tok_s is not None else ""
    runs = f" ×{r.repeats}" if r.repeats and r.repeats > 1 and r.out_tok_s is not None else ""
    return (num(r.out_tok_s, ".0f") + ci + runs
            + (f" † ({r.foreign_cores:.2f})" if r.foreign_cores is not None else "")
            + (failed_note(r.failed) if r.out_tok_s is not None else ""))


def p99_unreliable(r) -> bool:
    return r.out_tok_s is not None and (r.p99_samples is None or r.p99_samples < samples_needed("p99"))


def p99_cell(r, value: float | None, fmt: str, mark: str = "\\*") -> str:
    """A p99 column's value, marked where fewer than 100 samples stand behind it."""
    return num(value, fmt) + (mark if value is not None and p99_unreliable(r) else "")


ACCURACY_HEADERS = ("", "variant", "accuracy [95% CI]", "Δ vs baseline", "recovery", "paired", "KL", "top-1 agree",
                    "length ratio", "status")
PERF_HEADERS = ("variant", "out tok/s", "TTFT p99 ms", "TPOT p99 ms", "E2E p99 ms", "goodput", "max rate",
                "$/M out tok", "size", "server memory", "KV/tok", "max seqs")
GATE_ICON = {"pass": "✅", "regression": "❌", "inconclusive": "⚠️", "cannot be deployed": "⛔",
             "cannot gate": "⛔", "baseline": ""}


def legend(results: Results) -> str:
    return (f"★ = Pareto-optimal over accuracy, output tokens/s, E2E p99 latency, size and max seqs. 95% CIs in "
            "brackets; "
            "*paired* = the difference to the baseline on the same items (95% CI), items lost/gained, "
            "p of the test of no difference (exact McNemar for 0/1 scores, paired t for graded ones, "
            "a cluster t for grouped items); *KL*: mean KL divergence (nats/token) of next-token "
            "distributions from the baseline's on its own answers; *top-1 agree*: how often both put the same "
            "token first there. *recovery*: the variant's score over the baseline's (the baseline's over the "
            "variant's where lower is better); *length ratio*: mean tokens of its generated answers over the "
            "baseline's. Perf at concurrency "
            f"{headline_concurrency(results)} (highest measured level); out tok/s with its 95% interval: ×k "
            "marks the median of k repeats of the level, its interval a t interval on the repeats' logarithms; "
            "with one run, the interval its requests allow, which leaves run-to-run noise out; "
            "the latency columns of a repeated level are medians of the repeats. *goodput*: requests/s meeting "
            "every SLO "
            "bound; *max rate*: the highest rate a rate search found to meet the SLO; *$/M out tok*: the recipe's "
            "price of an accelerator-hour times the accelerators the engine holds, per million output tokens at "
            "that rate. *KV/tok*: KV-cache bytes per "
            "token (from the model config); *max seqs*: sequences of the first workload's length whose KV cache "
            f"fits beside the weights on {memory_target(results)} (an upper bound: activations ignored). "
            "‡ marks KV/tok and max seqs as the engine measured them instead: its KV memory over the KV tokens it "
            "reported at start-up (in brackets), and those tokens over the sequence length.")


def scored_note(v) -> str:
    """How a variant the engine could not serve was scored: in-process on which device, or not at all (its
    reason then says why)."""
    if v.status != "unsupported" or getattr(v, "served", None) is not False:
        return ""
    device = getattr(v, "inprocess_device", None)
    if getattr(v, "eval_backend", None) == "inprocess":
        return f" (scored in-process{' on ' + device if device else ''})"
    return "" if "not scored" in (v.reason or "") else " (not scored)"


def accuracy_cells(r) -> list[str]:
    acc = f"{r.accuracy:.3f} [{r.ci95[0]:.3f}, {r.ci95[1]:.3f}]" if r.accuracy is not None else "-"
    status = r.status + (" (in-process eval)" if r.backend == "inprocess" else "")
    return ["★" if r.pareto else "", r.variant, acc, num(r.delta, "+.3f"), percent(r.recovery), paired_cell(r),
            num(r.kl, ".4f"), percent(r.top1), percent(r.length_ratio), status]


def perf_cells(r, mark: str = "\\*") -> list[str]:
    return [r.variant, tok_s_cell(r), p99_cell(r, r.ttft_p99_ms, ".1f", mark),
            p99_cell(r, r.tpot_p99_ms, ".2f", mark), p99_cell(r, r.e2e_p99_ms, ".0f", mark),
            num(r.goodput_rps, ".1f"), num(r.max_rate_meeting_slo, ".2f"), num(r.usd_per_mtok, ".3g"),
            mb(r.size_bytes), server_memory(r),
            num(r.kv_bytes_per_token, ",d") + kv_mark(r), max_sequences_cell(r)]


def max_sequences_cell(r) -> str:
    """Sequences that fit; where the engine measured them, with the KV tokens it reported."""
    tokens = f" ({r.engine_kv_tokens:,} tok)" if r.kv_measured and r.engine_kv_tokens is not None else ""
    return num(r.max_sequences, ",d") + kv_mark(r) + tokens


def kv_mark(r) -> str:
    """‡ on the KV columns the engine measured (its start-up log), not computed from the model config."""
    return " ‡" if r.kv_measured and r.max_sequences is not None else ""


def by_accuracy(rows: list) -> list:
    return sorted(rows, key=lambda r: -(r.accuracy or -1))


def table(headers, rows: list[list[str]]) -> list[str]:
    return (["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
            + ["| " + " | ".join(map(markdown_cell, row)) + " |" for row in rows] + [""])


def summary_section(summary: Summary, baseline: str) -> list[str]:
    """The verdict: each variant's gate outcome and what decided it, then per task what to deploy."""
    lines = ["## Verdict", "", f"`quant gate` against **{markdown_cell(baseline)}** ({markdown_cell(summary.policy)}):",
             ""]
    lines += table(("variant", "gate", "deciding check"),
                   [[g.variant, f"{GATE_ICON[g.outcome]} {g.outcome}".strip(), g.deciding] for g in summary.gates])
    if summary.picks:
        lines += ["`quant choose` per task (highest output tokens/s within the policy's drop):", ""]
        lines += table(("task", "deploy", "why", "serve command", "export with a model card"),
                       [[p.task, p.variant or "nothing", p.why, f"`{p.command}`" if p.command else "-",
                         f"`{p.export}`" if p.export else "-"] for p in summary.picks])
    return lines


def render_markdown(results: Results, run_dir=None) -> str:
    lines = [f"# {markdown_cell(results.recipe_name)}: accuracy vs performance", ""]
    lines += summary_section(summarize(results, run_dir), results.baseline)
    lines += [f"Baseline: **{results.baseline}**. " + legend(results), ""] + model_notes(results)
    for task in tasks_of(results):
        rows = by_accuracy(rows_for_task(results, task, run_dir))
        lines += [f"## {markdown_cell(task)} ({markdown_cell(metric_of(results, task))})", ""]
        lines += table(ACCURACY_HEADERS, [accuracy_cells(r) for r in rows])
    lines += context_plot.markdown_section(results)
    rows = variant_rows(results)
    lines += ["## Performance and memory", ""] + table(PERF_HEADERS, [perf_cells(r) for r in rows])
    if any(p99_unreliable(r) for r in rows):
        lines += [P99_FOOTNOTE, ""]
    if any(r.foreign_cores is not None for r in rows):
        lines += [FOREIGN_LOAD_FOOTNOTE, ""]
    lines += checkpoints_table(results) + placement_table(results)
    if unmeasured := not_measurable_lines(results):
        lines += [f"## {NOT_MEASURABLE}", ""]
        lines += [f"- **{markdown_cell(n)}** — {markdown_cell(what)}" for n, what in unmeasured] + [""]
    failures = [(n, v) for n, v in results.variants.items() if not v.ok]
    if failures:
        lines += ["## Variants not fully measured", ""]
        lines += [f"- **{markdown_cell(n)}** — {v.status}: {markdown_cell(v.reason)}{scored_note(v)}"
                  for n, v in failures]
        lines.append("")
    return "\n".join(lines)


def model_notes(results: Results) -> list[str]:
    """What the reader must know about the baseline before reading its deltas."""
    notes = []
    if source := results.model_source:
        notes.append(f"The baseline was dequantized from a GGUF file ({source['gguf_file']}, "
                     f"{source['dequantized_from']}): its bf16 weights carry that rounding.")
    if zero := results.baseline_zero_tasks:
        notes.append(f"**Warning:** the baseline scores 0 on {', '.join(zero)}: "
                     f"{'that task' if len(zero) == 1 else 'those tasks'} cannot detect regressions for this model.")
    return [n for note in notes for n in (note, "")]


PLACEMENT_HEADERS = ["variant", "workload", "node", "GPUs", "perf isolation", "waited for lock"]


def placement_rows(results: Results) -> list[list[str]]:
    """Where each perf point ran: numbers of variants measured at the same time on one node are comparable
    only under perf isolation (docs/ray.md)."""
    return [[name, workload, p.placement.node, ", ".join(p.placement.gpus) or "none", p.placement.isolation,
             f"{p.placement.waited_s:.1f} s"]
            for name, v in results.variants.items() for workload, p in v.perf.items() if p.placement]


def placement_table(results: Results) -> list[str]:
    rows = placement_rows(results)
    return ["## Where perf was measured", ""] + table(PLACEMENT_HEADERS, rows) if rows else []


def checkpoints_table(results: Results) -> list[str]:
    return ["## Checkpoints", ""] + table(CHECKPOINT_HEADERS, checkpoint_rows(results))


def checkpoint_rows(results: Results) -> list[list[str]]:
    """What each variant's checkpoint is, from its manifest: scheme, format, bits per weight (quantized Linears;
    all Linears with the 16-bit ones), size, modules kept in 16-bit, quantization time, where it was served."""
    rows = []
    for name, v in results.variants.items():
        m = v.manifest or {}
        if m.get("bits_per_weight_quantized"):
            bits = f"{m['bits_per_weight_quantized']:.3f} · {m.get('bits_per_weight_all_linear') or 0:.3f}"
        else:
            bits = "-" if m.get("format") else "16 (not quantized)"
        seconds = (f"{m['quantization_seconds']:.1f} s ({m.get('backend', '?')})" if "quantization_seconds" in m
                   else "-")
        kept = m.get("ignore_expanded")
        served = "yes" if v.served else ("no: " + v.status if not v.ok else "no")
        if v.kv_cache_dtype:
            served += f" (KV cache {v.kv_cache_dtype})"
        if cells := endpoint_cells(v):
            rows.append([name, *cells, "-", mb(v.size_bytes), "-", "-", served])
            continue
        scheme = m.get("scheme_description") or m.get("scheme") or "-"
        if ran := describe_kernels(v.kernels):   # what the engine ran it as (a weight-only fallback, its kernels)
            scheme += f" ({ran})"
        rows.append([name, scheme, m.get("format") or "-", bits,
                     mb(v.size_bytes), str(len(kept)) if kept is not None else "-", seconds, served])
    return rows
