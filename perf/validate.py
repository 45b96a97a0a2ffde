"""The serving engine's own check of its part of a recipe, before work: the engine's interpreter, then every
engine argument (`engine.args`, each variant's `engine_args`) against the installed engine's own argument
parser: its flag names (perf/engines/flags.py), and each value as the sweep would pass it. An argument the
engine refuses is a recipe error, never a variant the engine "cannot serve"."""

from __future__ import annotations

import functools
import os

from core.checks import Found
from core.recipe import Engine, Variant


def check(engine: Engine, variants: list[tuple[int, Variant]]) -> tuple[Found, str | None]:
    """(what is wrong, the engine the arguments were checked against: None where they were not)."""
    from perf.engines.flags import FlagsUnknown, engine_flags_known, flag_problems, refused_values
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
        flags = engine_flags_known(python, facts, engine.env, [values for _, values in args])
    except FlagsUnknown as exc:
        found.warnings.append((("engine", "args"), f"engine arguments not checked against the engine's flags: {exc}"))
        return found, None
    name = f"{facts['distribution'] or 'the engine'} {facts['version'] or ''}".strip()
    to_parse = []
    for where, values in args:
        problems = flag_problems(values, flags)
        found.errors += [(where + (key,), message) for key, message in problems]
        wrong = {key for key, _ in problems}
        to_parse.append((where, {k: v for k, v in values.items() if k not in wrong}))
    try:
        refused = refused_values(python, facts, engine.env, [values for _, values in to_parse])
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
