"""Checks across a recipe's sections that its schema cannot make alone: names one section uses for another's
entries (gates.per_task -> tasks), workload names and files, requests that cannot fit the engine's context,
and gate settings no run of the recipe can decide under. Each returns (location, message) pairs."""

from __future__ import annotations

import difflib
from typing import Any

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
    named = [k for k, v in gates.perf.model_dump(exclude={"throughput_noise", "allow_foreign_load"}).items() if v is not None]
    if named and not perf.workloads:
        return [(("gates", "perf"), f"{', '.join(named)} set, but perf.workloads is empty: no perf is measured, "
                 "so these gates never apply")]
    return []


def generation_problems(tasks: list[tuple[int, Task]], engine: Engine | None,
                        variants: list[tuple[int, Variant]]) -> Problems:
    """A task's gen_kwargs.max_gen_toks that alone fills max_model_len: no prompt fits beside it."""
    problems = []
    for i, task in tasks:
        tokens = _as_int((task.gen_kwargs or {}).get("max_gen_toks"))
        over = [f"{limit} ({where})" for limit, where in _context_limits(engine, variants)
                if tokens is not None and tokens >= limit]
        if over:
            problems.append((("tasks", i, "gen_kwargs", "max_gen_toks"), f"{task.key}: {tokens} tokens to generate "
                             f"leave no room for a prompt within max_model_len {' and '.join(over)}"))
    return problems


def workload_problems(perf: Perf, engine: Engine | None, variants: list[tuple[int, Variant]]) -> Problems:
    """Workload names used twice; trace and length files that cannot be read; and requests longer than the
    max_model_len a variant is served with (prompt + output tokens): vLLM refuses a prompt over it and cuts
    the output of the rest short, so the level would not measure the lengths the workload names."""
    from perf.requests import longest_request

    problems: Problems = []
    seen: set[str] = set()
    for i, workload in enumerate(perf.workloads):
        if workload.name in seen:
            problems.append((("perf", "workloads", i, "name"), f"workload {workload.name!r} named twice: results "
                             "are kept per workload name"))
        seen.add(workload.name)
        try:
            longest = longest_request(workload)
        except (OSError, ValueError) as exc:
            problems.append((("perf", "workloads", i), f"{workload.name}: {_reason(exc)}"))
            continue
        over = [f"{limit} ({where})" for limit, where in _context_limits(engine, variants) if longest > limit]
        if over:
            problems.append((("perf", "workloads", i), f"{workload.name}: its longest request is {longest} tokens "
                             f"(prompt + output), over max_model_len {' and '.join(over)}: the engine refuses such a "
                             "request or cuts its output short; shorten the workload or raise max_model_len"))
    return problems


def _reason(exc: Exception) -> str:
    return f"cannot read {exc.filename} ({exc.strerror})" if isinstance(exc, OSError) and exc.filename else str(exc)


def _context_limits(engine: Engine | None, variants: list[tuple[int, Variant]]) -> list[tuple[int, str]]:
    """(max_model_len, where it is set) for each distinct limit the variants are served with."""
    common = _max_model_len(engine.args) if engine is not None else None
    by_limit: dict[int, list[str]] = {}
    for _, variant in variants:
        own = _max_model_len(variant.engine_args)
        limit = own if own is not None else common
        if limit is not None:
            by_limit.setdefault(limit, []).append(variant.name if own is not None else "")
    limits = []
    for limit, names in sorted(by_limit.items()):
        own = [n for n in names if n]
        where = [f"engine_args of {', '.join(own)}"] if own else []
        if len(own) < len(names):
            where.insert(0, "engine.args")
        limits.append((limit, "; ".join(where)))
    return limits


def _max_model_len(args: dict[str, Any]) -> int | None:
    values = [v for k, v in args.items() if k.replace("-", "_") == "max_model_len"]   # a flag may be spelt either way
    return _as_int(values[-1]) if values else None


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    return int(value) if isinstance(value, str) and value.isdigit() else None
