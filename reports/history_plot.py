"""perf-history.png: per variant, its headline output tokens/s in the earlier runs of the same checkpoint,
engine configuration and hardware and in this run (perf-history.json, written by the sweep and `quant report`
from the history), each engine version in its own colour; runs measured under foreign load hollow."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from core.store import atomic_path  # noqa: E402


def render_history_png(source: Path, path: Path) -> Path | None:
    try:
        series = json.loads(source.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(series, dict) or not series:
        return None
    fig, axes = plt.subplots(1, len(series), figsize=(5.2 * len(series), 3.6), squeeze=False)
    for ax, (name, runs) in zip(axes[0], series.items()):
        versions = list(dict.fromkeys(str(r.get("version")) for r in runs))
        colours = {v: f"C{i % 10}" for i, v in enumerate(versions)}
        for i, r in enumerate(runs):
            colour = colours[str(r.get("version"))]
            ax.plot(i, r["tok_s"], "o", color=colour, mfc="none" if r.get("foreign") else colour)
            if r.get("ci95"):
                ax.vlines(i, *r["ci95"], color=colour)
        for v, colour in colours.items():
            ax.plot([], [], "o", color=colour, label=f"engine {v}")
        ax.set_xticks(range(len(runs)), [str(r.get("started", ""))[:10] for r in runs], rotation=45, fontsize=7)
        ax.set_title(f"{name} (last point: this run)")
        ax.set_ylabel("output tokens/s (headline level)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)
    return path
