"""What `quant choose` prints: per task the variant to deploy, why, the others' reasons and its serve command;
or the same as JSON."""

from __future__ import annotations

import json

from reports.choose import Choice, LatencyLimit
from reports.headline import failed_note


def constraints(max_drop: dict[str, float], task: str, slos: list[LatencyLimit]) -> str:
    return f"drop <= {max_drop[task]:.3f}" + "".join(f", {s}" for s in slos)


def as_text(choices: dict[str, Choice | None], shared: str | None, commands: dict[str, str],
            max_drop: dict[str, float], slos: list[LatencyLimit], objective: str, engine: str = "",
            exports: dict[str, str] | None = None) -> str:
    """exports: per task the `quant export` of its variant (a folder with a model card), beside the serve command."""
    lines = []
    for task, c in choices.items():
        limits = constraints(max_drop, task, slos)
        if c is None:
            lines.append(f"{task}: no served variant meets {limits}")
            continue
        lines.append(f"{task}: deploy {c.variant}" + (" (blocked by the gate)" if c.blocked else ""))
        lines.append(f"  why: best {objective} with {limits} — {c.why}")
        lines.append(f"  {c.variant}: accuracy {c.accuracy:.3f} (drop {c.drop:+.3f}), {c.out_tok_s:.0f} output tok/s "
                     f"at concurrency {c.concurrency}{failed_note(c.failed)}"
                     + (f", ${c.score:.3g} per million output tokens" if objective == "cost" else "")
                     + (f", {c.score / 1e6:.1f} MB for one sequence (weights and its KV cache)"
                        if objective == "memory" else ""))
        if c.blocked:
            lines.append(f"  blocked: the recipe's gate blocks {c.variant} ({c.blocked}); --exclude-blocked "
                         "keeps it out")
        lines += [f"  not {name}: {why}" for name, why in c.rejected.items()]
        lines.append(f"  serve{f' ({engine}, as measured)' if engine else ''}: {commands[task]}")
        if exports:
            lines.append(f"  export (a folder with a model card, to hand over or push to the hub): {exports[task]}")
    if len(choices) > 1:
        lines.append(f"one variant for all tasks: {shared}" if shared else
                     "no single variant meets the constraints on every task")
    return "\n".join(lines)


def as_json(choices: dict[str, Choice | None], shared: str | None, commands: dict[str, str],
            max_drop: dict[str, float], slos: list[LatencyLimit], objective: str, engine: str = "",
            exports: dict[str, str] | None = None) -> str:
    return json.dumps({
        "objective": objective, "engine": engine or None,
        "constraints": {task: constraints(max_drop, task, slos) for task in choices},
        "one_variant_for_all": shared if len(choices) > 1 else None,
        "choices": {task: None if c is None else {
            "variant": c.variant, "accuracy": c.accuracy, "drop": c.drop, "output_tokens_per_s": c.out_tok_s,
            "failed_requests": list(c.failed) if c.failed else None,
            "concurrency": c.concurrency, "serve_command": commands[task], "why": c.why,
            "interval": list(c.score_ci) if c.score_ci else None, "blocked": c.blocked,
            **({"export_command": exports[task]} if exports else {}), "rejected": c.rejected,
            **({"usd_per_million_output_tokens": c.score} if objective == "cost" else {}),
            **({"bytes_per_sequence": c.score} if objective == "memory" else {})}
            for task, c in choices.items()}}, indent=2)
