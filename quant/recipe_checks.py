"""Checks across a recipe's sections that its schema cannot make alone: names one section uses for another's
entries (gates.per_task -> tasks), tokens to generate that leave no room for a prompt in the engine's
context, the context each variant is served with, and gate settings no run of the recipe can decide under.
Each check returns (location, message) pairs."""

from __future__ import annotations

import difflib

from core.checks import as_int
from core.recipe import Engine, Gates, Task, Variant
from core.recipe_perf import Perf

Problems = list[tuple[tuple, str]]


def per_task_problems(gates: Gates, tasks: list[Task]) -> Problems:
    """gates.per_task keys that name no task of the recipe (a task's key: its label, else its name)."""
    keys = [t.key for t in tasks]
    problems = []
    for key in gates.per_task:
        if key not in keys:
            near = difflib.get_close_matches(key, keys, n=3, cutoff=0.6)
            hint = f"did you mean {', '.join(near)}?" if near else f"the recipe's tasks: {', '.join(keys)}"
            problems.append((("gates", "per_task", key), f"no task {key!r} in the recipe's tasks; {hint}"))
    return problems


def min_n_warnings(gates: Gates, tasks: list[tuple[int, Task]]) -> Problems:
    """A task limited to fewer items than gates.min_n: every gate check on it is inconclusive."""
    return [(("tasks", i, "limit"), f"{task.key}: limit {task.limit} is below gates.min_n {gates.min_n}: the "
             f"recipe's gate can never decide on this task (every check inconclusive)")
            for i, task in tasks if task.limit is not None and task.limit < gates.min_n]


def perf_gate_warnings(gates: Gates, perf: Perf) -> Problems:
    """Perf gates on a recipe that measures no perf: the gate has nothing to compare them with."""
    named = [k for k, v in gates.perf.model_dump(exclude={"throughput_noise", "allow_foreign_load",
                                                                  "max_failed_requests"}).items() if v is not None]
    if named and not perf.workloads:
        return [(("gates", "perf"), f"{', '.join(named)} set, but perf.workloads is empty: no perf is measured, "
                 "so these gates never apply")]
    return []


def generation_problems(tasks: list[tuple[int, Task]], engine: Engine | None,
                        variants: list[tuple[int, Variant]]) -> Problems:
    """A task's gen_kwargs.max_gen_toks that alone fills max_model_len: no prompt fits beside it."""
    from perf.validate import context_limits

    problems = []
    for i, task in tasks:
        tokens = as_int((task.gen_kwargs or {}).get("max_gen_toks"))
        over = [f"{limit} ({where})" for limit, where in context_limits(engine, variants)
                if tokens is not None and tokens >= limit]
        if over:
            problems.append((("tasks", i, "gen_kwargs", "max_gen_toks"), f"{task.key}: {tokens} tokens to generate "
                             f"leave no room for a prompt within max_model_len {' and '.join(over)}"))
    return problems


LONG_CONTEXT_OVERRIDE = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"   # vLLM's own switch for a context past the model's


def position_problems(model_dir, engine: Engine | None, variants: list[tuple[int, Variant]]) -> Problems:
    """A max_model_len above the model's position limit (config.json's max_position_embeddings): the engine
    refuses it only at start-up, unless engine.env sets vLLM's override."""
    from perf.validate import context_limits

    if model_dir is None or (engine is not None and engine.env.get(LONG_CONTEXT_OVERRIDE) not in (None, "", "0")):
        return []
    positions = model_positions(model_dir)
    if positions is None:
        return []
    return [(("engine", "args", "max_model_len"), f"max_model_len {limit} ({where}) is above the model's "
             f"max_position_embeddings {positions}: the engine refuses it (set engine.env "
             f"{LONG_CONTEXT_OVERRIDE}: '1' to serve it anyway)")
            for limit, where in context_limits(engine, variants) if limit > positions]


def model_positions(model_dir) -> int | None:
    """config.json's max_position_embeddings (a multimodal model's text config's); None where it has none."""
    import json
    from pathlib import Path

    try:
        config = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    config = config.get("text_config", config) if isinstance(config.get("text_config"), dict) else config
    positions = config.get("max_position_embeddings")
    return positions if type(positions) is int and positions > 0 else None


def served_contexts(model_dir, engine: Engine | None,
                    variants: list[tuple[int, Variant]]) -> list[tuple[str, int, str]]:
    """(variant, max_model_len, where it comes from) for each variant the engine serves; a variant whose recipe
    sets none is served with the model's own max_position_embeddings, as vLLM does."""
    from perf.validate import served_limits

    positions = model_positions(model_dir) if model_dir is not None else None
    found = []
    for variant, limit, where in served_limits(engine, variants):
        if limit is None and positions is not None:
            limit, where = positions, "the model's max_position_embeddings"
        if limit is not None:
            found.append((variant.name, limit, where))
    return found
