"""pareto.md: one table per task."""

from __future__ import annotations

from reports.table import headline_concurrency, metric_of, rows_for_task, tasks_of


def mb(n: int | None) -> str:
    return f"{n / 1e6:.2f} MB" if n else "-"


def num(x: float | None, fmt: str) -> str:
    return format(x, fmt) if x is not None else "-"


def render_markdown(results: dict) -> str:
    c = headline_concurrency(results)
    lines = [f"# {results['recipe_name']}: accuracy vs performance", "",
             f"Baseline: **{results['baseline']}**. Perf at concurrency {c} (highest measured level). "
             "★ = Pareto-optimal over accuracy, output tokens/s and size. 95% CIs in brackets.", ""]
    for task in tasks_of(results):
        rows = rows_for_task(results, task)
        metric = metric_of(results, task)
        lines += [f"## {task} ({metric})", "",
                  "| | variant | accuracy | Δ vs baseline | out tok/s | TTFT p99 ms | TPOT p99 ms | size | status |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in sorted(rows, key=lambda r: -(r.accuracy or -1)):
            acc = f"{r.accuracy:.3f} [{r.ci95[0]:.3f}, {r.ci95[1]:.3f}]" if r.accuracy is not None else "-"
            delta = f"{r.delta:+.3f}" if r.delta is not None else "-"
            status = r.status + (" (in-process eval)" if r.backend == "inprocess" else "")
            lines.append(f"| {'★' if r.pareto else ''} | {r.variant} | {acc} | {delta} | {num(r.out_tok_s, '.0f')} "
                         f"| {num(r.ttft_p99_ms, '.1f')} | {num(r.tpot_p99_ms, '.2f')} | {mb(r.size_bytes)} | {status} |")
        lines.append("")
    failures = [(n, v) for n, v in results["variants"].items() if v["status"] != "ok"]
    if failures:
        lines += ["## Variants not fully measured", ""]
        lines += [f"- **{n}** — {v['status']}: {v['reason']}" for n, v in failures]
        lines.append("")
    return "\n".join(lines)
