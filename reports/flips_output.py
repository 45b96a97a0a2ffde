"""What `quant diff` prints: per task the flipped items, lost first, with both responses and their diff; or the
same as JSON."""

from __future__ import annotations

import json
from dataclasses import asdict

from reports.flips import TaskFlips


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in (text.splitlines() or [""]))


def _score(x: float) -> str:
    return f"{x:g}"


def as_text(found: list[TaskFlips], baseline: str, candidate: str) -> str:
    lines = [f"diff: {candidate} vs {baseline}"]
    for t in found:
        lines.append(f"\n{t.task} ({t.metric}): {len(t.flips)} of {t.n_paired} paired items flipped: "
                     f"{t.lost} lost, {t.gained} gained")
        for f in t.flips:
            lines += [f"\n  {'LOST' if f.lost else 'GAINED'} item {f.doc_id}: {t.metric} "
                      f"{_score(f.baseline_score)} -> {_score(f.candidate_score)}",
                      "  prompt:", _indent(f.prompt),
                      f"  target: {f.target if isinstance(f.target, str) else json.dumps(f.target)}",
                      f"  answer (filtered): baseline {f.baseline_answer!r}, candidate {f.candidate_answer!r}",
                      "  baseline response:", _indent(f.baseline_response),
                      "  candidate response:", _indent(f.candidate_response),
                      "  diff:", _indent("\n".join(f.diff) or "(responses equal; the score differs)")]
    return "\n".join(lines)


def as_json(found: list[TaskFlips], baseline: str, candidate: str) -> str:
    return json.dumps({"baseline": baseline, "candidate": candidate, "tasks": [
        {"task": t.task, "metric": t.metric, "n_paired": t.n_paired, "lost": t.lost, "gained": t.gained,
         "flips": [asdict(f) for f in t.flips]} for t in found]}, indent=2, default=str) + "\n"
