"""report.html's view of the items behind each variant's verdict: per variant (anchor `flips-<variant>`) and
task, the items it scored differently from the baseline, lost first, as `quant diff` lists them."""

from __future__ import annotations

from pathlib import Path

from core.foreign_text import html_text
from core.results import Results
from core.run_layout import RunLayout
from reports.flips import Flip, TaskFlips, read_records, task_flips
from reports.samples import ItemFileError

SHOWN = 20   # flips per variant and task on the page; `quant diff` lists them all


def anchor(variant: str) -> str:
    return "flips-" + "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in variant)


def _records(run_dir: Path, variant: str, task: str):
    path = RunLayout(run_dir).variant(variant).items(task)
    return (path, read_records(path)) if path.is_file() else None


def _flip(f: Flip, metric: str) -> str:
    e = html_text
    return (f"<li><b>{'lost' if f.lost else 'gained'}</b> item {e(str(f.doc_id))}: {e(metric)} "
            f"{f.baseline_score:g} → {f.candidate_score:g}; answers {e(repr(f.baseline_answer))} → "
            f"{e(repr(f.candidate_answer))}<pre>{e(f.prompt)}</pre><pre>{e(chr(10).join(f.diff) or '(same response)')}"
            f"</pre></li>")


def _task(t: TaskFlips) -> str:
    more = len(t.flips) - SHOWN
    return (f"<details><summary>{html_text(t.task)}: {t.lost} lost, {t.gained} gained of {t.n_paired}</summary>"
            f"<ol>{''.join(_flip(f, t.metric) for f in t.flips[:SHOWN])}</ol>"
            + (f"<p>{more} more: <code>quant diff</code> lists every one.</p>" if more > 0 else "") + "</details>")


def flips_section(results: Results, run_dir: Path | None) -> str:
    """The section, or "" where no variant has per-item records beside the baseline's."""
    if run_dir is None or results.baseline not in results.variants:   # `--only` without the baseline
        return ""
    base = results.variants[results.baseline]
    parts = []
    for name, record in results.variants.items():
        if name == results.baseline:
            continue
        tasks = []
        for task, entry in record.accuracy.items():
            sides = (_records(run_dir, results.baseline, task), _records(run_dir, name, task))
            if task in base.accuracy and all(sides):
                try:
                    tasks.append(task_flips(task, base.accuracy[task].dump(), *sides))
                except (ItemFileError, KeyError):   # unpaired or unreadable items: the gate reports those
                    continue
        if tasks:
            lost, gained = sum(t.lost for t in tasks), sum(t.gained for t in tasks)
            parts.append(f"<details id='{anchor(name)}'><summary><b>{html_text(name)}</b>: {lost} lost, "
                         f"{gained} gained</summary>{''.join(_task(t) for t in tasks)}</details>")
    if not parts:
        return ""
    return ("<h2 id='flips'>Items that flipped</h2><p>Per variant and task, the items it scored differently "
            "from the baseline, lost first: the prompt and a diff of the two responses.</p>" + "".join(parts))
