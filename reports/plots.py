"""pareto.png: per task, accuracy vs output throughput (top) and vs size on disk (bottom); 95% CIs as
error bars, Pareto-optimal variants in green, variants the engine could not serve as dotted lines; point
labels placed where they overlap no other (reports/plot_labels.py)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from core.results import Results  # noqa: E402
from core.store import atomic_path  # noqa: E402
from reports.plot_labels import place_labels  # noqa: E402
from reports.table import headline_concurrency, metric_of, rows_for_task, tasks_of  # noqa: E402

AXES = (("out_tok_s", "output tokens/s (concurrency {c})", 1.0),
        ("size_bytes", "size on disk (MB)", 1e-6))


def _panel(ax, rows, attr: str, scale: float, served_only: bool) -> list[tuple[float, float, str]]:
    """Draws the points; returns their labels, placed once the figure's layout is final."""
    placed = [r for r in rows if getattr(r, attr) is not None and (r.out_tok_s is not None or not served_only)]
    for r in placed:
        err = [[r.accuracy - r.ci95[0]], [r.ci95[1] - r.accuracy]]
        ax.errorbar(getattr(r, attr) * scale, r.accuracy, yerr=err, fmt="o", capsize=3,
                    color="tab:green" if r.pareto else "tab:blue" if r.out_tok_s is not None else "tab:red")
    for r in rows:
        if r not in placed:  # accuracy only (the engine could not serve it)
            ax.axhline(r.accuracy, color="tab:red", lw=0.8, ls=":")
            ax.annotate(f"{r.variant} (not served)", (0.01, r.accuracy), xycoords=("axes fraction", "data"),
                        fontsize=7, color="tab:red", xytext=(0, 2), textcoords="offset points")
    ax.grid(alpha=0.3)
    return [(getattr(r, attr) * scale, r.accuracy, r.variant) for r in placed]


def render_pareto_png(results: Results, path: Path) -> Path:
    tasks = tasks_of(results) or ["-"]
    fig, axes = plt.subplots(2, len(tasks), figsize=(5.2 * len(tasks), 8.4), squeeze=False)
    c = headline_concurrency(results)
    labels = []
    for col, task in enumerate(tasks):
        rows = [r for r in rows_for_task(results, task) if r.accuracy is not None]
        for row, (attr, label, scale) in enumerate(AXES):
            ax = axes[row][col]
            labels.append((ax, _panel(ax, rows, attr, scale, served_only=attr == "out_tok_s")))
            ax.set_title(task)
            ax.set_xlabel(label.format(c=c))
            ax.set_ylabel(metric_of(results, task))
    legend = textwrap.fill("(green = Pareto-optimal over accuracy, throughput, p99 latency, size and sequences that "
                           "fit; red = not served, scored in-process)", width=int(10 * fig.get_figwidth()),
                           break_on_hyphens=False)
    fig.suptitle(f"{results.recipe_name}: accuracy vs throughput and size\n{legend}")
    fig.tight_layout()
    for ax, points in labels:
        ax.margins(x=0.15, y=0.1)   # room for labels beside the outermost points
        ax.autoscale_view()
        place_labels(ax, points)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)
    return path
