"""pareto.png: accuracy vs output throughput, one panel per task, 95% CIs as error bars."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from reports.table import headline_concurrency, metric_of, rows_for_task, tasks_of  # noqa: E402


def render_pareto_png(results: dict, path: Path) -> Path:
    tasks = tasks_of(results)
    fig, axes = plt.subplots(1, max(1, len(tasks)), figsize=(5.2 * max(1, len(tasks)), 4.4), squeeze=False)
    c = headline_concurrency(results)
    for ax, task in zip(axes[0], tasks):
        rows = [r for r in rows_for_task(results, task) if r.accuracy is not None]
        served = [r for r in rows if r.out_tok_s is not None]
        for r in served:
            err = [[r.accuracy - r.ci95[0]], [r.ci95[1] - r.accuracy]]
            ax.errorbar(r.out_tok_s, r.accuracy, yerr=err, fmt="o", capsize=3,
                        color="tab:green" if r.pareto else "tab:blue")
            ax.annotate(r.variant, (r.out_tok_s, r.accuracy), textcoords="offset points", xytext=(4, 4), fontsize=8)
        unserved = [r for r in rows if r.out_tok_s is None]
        for r in unserved:  # accuracy only (engine could not serve): drawn on the left edge
            ax.axhline(r.accuracy, color="tab:red", lw=0.8, ls=":")
            ax.annotate(f"{r.variant} (not served)", (0.01, r.accuracy), xycoords=("axes fraction", "data"),
                        fontsize=7, color="tab:red", xytext=(0, 2), textcoords="offset points")
        ax.set_title(task)
        ax.set_xlabel(f"output tokens/s (concurrency {c})")
        ax.set_ylabel(metric_of(results, task))
        ax.grid(alpha=0.3)
    fig.suptitle(f"{results['recipe_name']}: accuracy vs throughput "
                 "(green = Pareto-optimal over accuracy, throughput and size)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
