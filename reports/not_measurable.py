"""What an engine could not measure for a variant (an endpoint without aligned prompt log-probabilities, a
server whose processes are not the suite's): one line per variant and kind, for the report's section "Not
measurable on this engine". Those tasks and measurements are absent from the tables, never scored another way."""

from __future__ import annotations

from pathlib import Path

from core.results import Results

TITLE = "Not measurable on this engine"
KINDS = {"tasks": "tasks", "kl": "KL against the baseline on", "memory": "memory", "perf": "perf of"}


def not_measurable_lines(results: Results) -> list[tuple[str, str]]:
    """(variant, what and why) for each kind of measurement a variant's engine could not give."""
    lines = []
    for name, v in results.variants.items():
        for kind, items in (v.not_measurable or {}).items():
            by_reason: dict[str, list[str]] = {}
            for what, why in items.items():
                by_reason.setdefault(why, []).append(what)
            for why, whats in by_reason.items():
                lines.append((name, f"{KINDS.get(kind, kind)} {', '.join(whats)}: {why}"))
    return lines


def endpoint_cells(v) -> tuple[str, str] | None:
    """The scheme and format cells in the checkpoints table of a variant served by another engine: a GGUF file
    on llama.cpp, or an endpoint (where it is served, not its weights)."""
    if not v.endpoint:
        return None
    if v.endpoint.get("engine") == "llama.cpp":
        return f"{Path(v.endpoint.get('gguf', '?')).name} on llama.cpp", "GGUF"
    return f"endpoint {v.endpoint.get('base_url')} (model {v.endpoint.get('model')})", "served elsewhere"
