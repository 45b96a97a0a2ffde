"""The perf stage's own check of its part of a recipe, before work: the engine's interpreter, then every
engine argument (`engine.args`, each variant's `engine_args`) against the installed engine's own argument
parser: its flag names (perf/engines/flags.py), and each value as the sweep would pass it. An argument the
engine refuses is a recipe error, never a variant the engine "cannot serve". And the perf workloads: names
used once, files that can be read (a noise floor's too), requests that fit the context each variant is served with."""

from __future__ import annotations

import functools
import os
from typing import Any

from core.checks import Found, as_int
from core.recipe import Engine, Variant
from core.recipe_perf import Perf


def check(engine: Engine, variants: list[tuple[int, Variant]]) -> tuple[Found, str | None]:
    """(what is wrong, the engine the arguments were checked against: None where they were not)."""
    from perf.engines.flags import FlagsUnknown, engine_flags_known, engine_name, flag_problems, refused_values
    from perf.engines.known_unsupported import kv_cache_dtype_refusal
    from perf.engines.process import EngineStartError
    from perf.engines.vllm import resolve_engine_python

    found = Found()
    try:
        python = resolve_engine_python(engine.python)
    except EngineStartError as exc:
        found.errors.append((("engine", "python"), str(exc)))
        return found, None
    args = [(("engine", "args"), engine.args)] + [(("variants", i, "engine_args"), v.engine_args)
                                                 for i, v in variants]
    args += [(("variants", i), {"kv_cache_dtype": v.kv_cache_dtype}) for i, v in variants if v.kv_cache_dtype]
    if not any(values for _, values in args):
        return found, None
    try:
        facts = engine_facts_once(python, engine.env)
        flags = engine_flags_known(python, facts, engine.env, [values for _, values in args], announce=True)
    except FlagsUnknown as exc:
        found.warnings.append((("engine", "args"), f"engine arguments not checked against the engine's flags: {exc}"))
        return found, None
    name = engine_name(facts)
    to_parse = []
    for where, values in args:
        problems = flag_problems(values, flags)
        found.errors += [(where + (key,), message) for key, message in problems]
        wrong = {key for key, _ in problems}
        to_parse.append((where, {k: v for k, v in values.items() if k not in wrong}))
    try:
        refused = refused_values(python, facts, engine.env, [values for _, values in to_parse], flags, announce=True)
    except FlagsUnknown as exc:
        found.warnings.append((("engine", "args"), f"engine argument values not parsed by the engine: {exc}"))
        return found, name
    for (where, values), messages in zip(to_parse, refused):
        found.errors += [(where + (key,), f"{name} refuses {values[key]!r}: {message}")
                         for key, message in messages.items()]
    refused_already = {loc for loc, _ in found.errors}
    for i, variant in variants:   # values the parser takes but the engine's attention backend cannot store
        where = ("variants", i, "kv_cache_dtype")
        reason = kv_cache_dtype_refusal(facts, variant.kv_cache_dtype) if variant.kv_cache_dtype else None
        if reason and where not in refused_already:
            found.errors.append((where, reason))
    return found, name


def engine_facts_once(python: str, env: dict[str, str]) -> dict:
    """perf.engines.vllm.engine_facts, asked once per interpreter and environment in this process: validation
    and the sweep's start both need them, and each asking starts the engine's python."""
    return dict(_facts(python, tuple(sorted({**os.environ, **env}.items()))))


@functools.lru_cache(maxsize=8)
def _facts(python: str, environment: tuple) -> tuple:
    from perf.engines.vllm import engine_facts
    return tuple(engine_facts(python, dict(environment)).items())


def check_workloads(perf: Perf, engine: Engine | None, variants: list[tuple[int, Variant]]) -> Found:
    """Workload names used twice; trace and length files that cannot be read; and requests longer than the
    max_model_len a variant is served with (prompt + output tokens): vLLM refuses a prompt over it and cuts
    the output of the rest short, so the level would not measure the lengths the workload names."""
    from perf.requests import longest_request

    found = Found()
    seen: set[str] = set()
    for i, workload in enumerate(perf.workloads):
        if workload.name in seen:
            found.errors.append((("perf", "workloads", i, "name"), f"workload {workload.name!r} named twice: "
                                 "results are kept per workload name"))
        seen.add(workload.name)
        try:
            longest = longest_request(workload)
        except (OSError, ValueError) as exc:
            found.errors.append((("perf", "workloads", i), f"{workload.name}: {_reason(exc)}"))
            continue
        over = [f"{limit} ({where})" for limit, where in context_limits(engine, variants) if longest > limit]
        if over:
            found.errors.append((("perf", "workloads", i), f"{workload.name}: its longest request is {longest} "
                                 f"tokens (prompt + output), over max_model_len {' and '.join(over)}: the engine "
                                 "refuses such a request or cuts its output short; shorten the workload or raise "
                                 "max_model_len"))
    if perf.noise_floor is not None:
        from perf.noise import NoiseFloorError, load

        try:
            load(perf.noise_floor)
        except NoiseFloorError as exc:
            found.errors.append((("perf", "noise_floor"), str(exc)))
    return found


def _reason(exc: Exception) -> str:
    return f"cannot read {exc.filename} ({exc.strerror})" if isinstance(exc, OSError) and exc.filename else str(exc)


def context_limits(engine: Engine | None, variants: list[tuple[int, Variant]]) -> list[tuple[int, str]]:
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


def served_limits(engine: Engine | None,
                  variants: list[tuple[int, Variant]]) -> list[tuple[Variant, int | None, str]]:
    """(variant, its max_model_len or None where the recipe leaves it to the engine, where it is set) for each
    variant the engine serves (not an endpoint's, nor llama.cpp's)."""
    common = _max_model_len(engine.args) if engine is not None else None
    served = []
    for _, variant in variants:
        if variant.endpoint is not None or variant.llamacpp is not None:
            continue
        own = _max_model_len(variant.engine_args)
        served.append((variant, own if own is not None else common,
                       "its engine_args" if own is not None else "engine.args"))
    return served


def _max_model_len(args: dict[str, Any]) -> int | None:
    values = [v for k, v in args.items() if k.replace("-", "_") == "max_model_len"]   # a flag may be spelt either way
    return as_int(values[-1]) if values else None

