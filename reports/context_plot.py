"""Accuracy against context length: the recipe's long-context tasks (niah_<tokens>, evals/needle.py), one line per
variant with 95% CIs (long_context.png), and the same numbers as a table for the Markdown and HTML reports."""

from __future__ import annotations

import re
from pathlib import Path

from core.results import Results

LENGTH_TASK = re.compile(r"^niah_(\d+)$")   # a task whose name ends in its context length in tokens


def context_tasks(results: Results) -> list[tuple[int, str]]:
    """(context tokens, task key) of each long-context task of the run, shortest first."""
    found = []
    for task in results.recipe.get("tasks") or []:
        name, key = (task, task) if isinstance(task, str) else (task.get("name"), task.get("label") or task.get("name"))
        match = LENGTH_TASK.match(str(name))
        if match and key in results.tasks():
            found.append((int(match.group(1)), key))
    return sorted(found)


def accuracy_by_length(results: Results) -> dict[str, list[tuple[int, float, tuple[float, float]]]]:
    """Per variant, (context tokens, accuracy, 95% CI) at each long-context task it has a score for."""
    lengths = context_tasks(results)
    table = {}
    for name, variant in results.variants.items():
        points = [(n, acc.value, tuple(acc.ci95)) for n, key in lengths if (acc := variant.accuracy.get(key))]
        if points:
            table[name] = points
    return table


def markdown_section(results: Results) -> list[str]:
    """A table of accuracy per variant and context length; nothing where the run has fewer than two lengths."""
    lengths = [n for n, _ in context_tasks(results)]
    if len(lengths) < 2:
        return []
    rows = accuracy_by_length(results)
    head = ["variant", *(f"{n:,} tokens" for n in lengths)]
    lines = ["## Accuracy by context length", "",
             "Needle retrieval (exact match) at each context length; 95% CIs in brackets "
             "(long_context.png plots them).", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, points in rows.items():
        at = {n: (value, ci) for n, value, ci in points}
        cells = [f"{at[n][0]:.3f} [{at[n][1][0]:.2f}, {at[n][1][1]:.2f}]" if n in at else "-" for n in lengths]
        lines.append("| " + " | ".join([name, *cells]) + " |")
    return lines + [""]


def render_context_png(results: Results, path: Path) -> Path | None:
    """long_context.png where the run has two or more context lengths, else None (and no file)."""
    rows = accuracy_by_length(results)
    lengths = [n for n, _ in context_tasks(results)]
    if len(lengths) < 2 or not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from core.store import atomic_path

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (name, points) in enumerate(rows.items()):
        shift = 1 + 0.02 * (i - (len(rows) - 1) / 2)   # side by side, so the error bars do not hide each other
        xs = [n * shift for n, _, _ in points]
        ys = [value for _, value, _ in points]
        err = [[value - ci[0] for _, value, ci in points], [ci[1] - value for _, value, ci in points]]
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=name)
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [f"{n:,}" for n in lengths])
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("accuracy (exact match)")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"{results.recipe_name}: accuracy vs context length (95% CIs)")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)
    return path
