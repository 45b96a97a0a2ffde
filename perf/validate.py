"""The perf stage's own check of its part of a recipe, before work: the engine's interpreter, then every
engine argument (`engine.args`, each variant's `engine_args`) against the installed engine's own argument
parser: its flag names (perf/engines/flags.py), and each value as the sweep would pass it. An argument the
engine refuses is a recipe error, never a variant the engine "cannot serve". And the perf workloads: names
used once, files that can be read (a noise floor's too), requests that fit the context each variant is served with."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from core.checks import Found, as_int
from core.recipe import Engine, Task, Variant
from core.recipe_perf import Perf


ENGINE_SETTINGS_PREFIX = "VLLM_"   # engine.env entries that only configure vLLM: passed even to a check
TRUST_RECIPE = "--trust-recipe"
REMOTE_CODE = ("trust_remote_code", "trust-remote-code")


def recipe_code(engine: Engine) -> list[str]:
    """What of the recipe's engine section would run code of the recipe's choosing when the engine is asked
    anything: its python, and engine.env entries other than vLLM's own settings (PYTHONPATH with a
    sitecustomize.py, LD_PRELOAD, ...). A check runs these only when the user trusts the recipe."""
    named = [f"engine.python {engine.python!r}"] if engine.python else []
    return named + [f"engine.env {name}" for name in engine.env if not name.startswith(ENGINE_SETTINGS_PREFIX)]


def remote_code_problems(args: list[tuple[tuple, dict]]) -> list[tuple[tuple, str]]:
    """trust_remote_code set in engine arguments: the model repository's own Python would run; refused unless
    the user asked for it."""
    return [(where + (key,), f"{key} runs the model repository's own code: refused unless you ask for it "
                             f"(quant sweep --trust-remote-code; quant validate / doctor {TRUST_RECIPE})")
            for where, values in args for key, value in values.items()
            if key in REMOTE_CODE and value not in (False, None, "false", "False", 0)]


def check(engine: Engine, variants: list[tuple[int, Variant]], run_recipe: bool = False,
          remote_code: bool = False) -> tuple[Found, str | None]:
    """(what is wrong, the engine the arguments were checked against: None where they were not).
    run_recipe: whether the engine may be asked through what the recipe names (recipe_code); else that check is
    skipped, with a warning saying so. remote_code: whether the user allows trust_remote_code."""
    from perf.engines.flags import FlagsUnknown, engine_flags_known, engine_name, flag_problems, refused_values
    from perf.engines.known_unsupported import kv_cache_dtype_refusal
    from perf.engines.process import EngineStartError
    from perf.engines.vllm import resolve_engine_python

    found = Found()
    args = [(("engine", "args"), engine.args)] + [(("variants", i, "engine_args"), v.engine_args)
                                                 for i, v in variants]
    if not remote_code:
        found.errors += remote_code_problems(args)
    if not run_recipe and (named := recipe_code(engine)):
        found.warnings.append((("engine",), f"engine arguments not checked against the engine: that would run "
                               f"what the recipe names ({', '.join(named)}); {TRUST_RECIPE} runs it"))
        return found, None
    try:
        python = resolve_engine_python(engine.python)
    except EngineStartError as exc:
        found.errors.append((("engine", "python"), str(exc)))
        return found, None
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


def check_seeded_sampling(engine: Engine, variants: list[tuple[int, Variant]], tasks: list[tuple[int, Task]],
                          run_recipe: bool = False) -> Found:
    """Sampled tasks (each request seeded) on an engine known to die on a seeded request whose prompt it splits
    across steps, unless every variant it serves keeps prompts whole (enable_chunked_prefill: false)."""
    from perf.engines.flags import engine_name
    from perf.engines.known_unsupported import seeded_split_prefill_crash
    from perf.engines.process import EngineStartError
    from perf.engines.vllm import resolve_engine_python

    found = Found()
    sampled = [task.key for _, task in tasks if (task.gen_kwargs or {}).get("temperature", 0) > 0]
    served = [(i, v) for i, v in variants if not (v.endpoint or v.llamacpp)]
    if not sampled or not served or (not run_recipe and recipe_code(engine)):
        return found
    try:
        facts = engine_facts_once(resolve_engine_python(engine.python), engine.env)
    except EngineStartError:
        return found   # check() says why
    crash = seeded_split_prefill_crash(facts)
    if crash is None:
        return found
    where = set()
    for i, variant in served:
        if {**engine.args, **variant.engine_args}.get("enable_chunked_prefill") is not False:
            own = "enable_chunked_prefill" in variant.engine_args
            where.add(("variants", i, "engine_args", "enable_chunked_prefill") if own else ("engine", "args"))
    found.errors += [(loc, f"{', '.join(sampled)} sample with a seed per request, and {engine_name(facts)} dies on "
                      f"a seeded request whose prompt it splits across steps (chunked prefill: \"{crash}\"); set "
                      "enable_chunked_prefill: false in engine.args") for loc in sorted(where)]
    return found


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



# --- llama.cpp variants ------------------------------------------------------------------------------------

GGUF_MAGIC = b"GGUF"
GGUF_VERSIONS = (2, 3)         # the versions llama.cpp reads (v1 files are refused by it)
GGUF_MAX_COUNT = 2**24         # tensors or metadata entries past this: a damaged header, not a model


def gguf_problem(path: Path) -> str | None:
    """Why `path` is not a GGUF file llama.cpp can load, from its header alone (magic, version, counts), else
    None. A failed download often saves an HTML error page under the file's name."""
    import struct

    try:
        with open(path, "rb") as file:
            head = file.read(24)
    except OSError as exc:
        return f"{path.name}: cannot read it ({exc.strerror})"
    if head[:4] != GGUF_MAGIC:
        shown = head[:16].decode("ascii", "replace")
        shown = "".join(c if c.isprintable() else "." for c in shown)
        return (f"{path.name}: not a GGUF file (it begins {shown!r}, not 'GGUF'; a failed download saves an error "
                "page under the file's name: fetch it again)")
    if len(head) < 24:
        return f"{path.name}: cut short ({len(head)} bytes, less than a GGUF header)"
    version, tensors, entries = struct.unpack("<IQQ", head[4:24])
    if version not in GGUF_VERSIONS:
        return f"{path.name}: GGUF version {version}, which llama.cpp does not read (it reads {GGUF_VERSIONS})"
    if not 0 < tensors < GGUF_MAX_COUNT or entries >= GGUF_MAX_COUNT:
        return f"{path.name}: a damaged GGUF header ({tensors} tensors, {entries} metadata entries)"
    return None


# Run in llama.cpp's python: each server setting, as the sweep passes it (`--name value`), checked against
# llama-cpp-python's own settings models (the server builds its command line from them).
_LLAMACPP_PROBE = r"""
import difflib, json, sys
from pydantic import ValidationError
from llama_cpp.server.settings import ModelSettings, ServerSettings
problems = {}
for name, value in json.loads(sys.stdin.read()).items():
    owner = ModelSettings if name in ModelSettings.model_fields else (
        ServerSettings if name in ServerSettings.model_fields else None)
    if owner is None:
        close = difflib.get_close_matches(name, [*ModelSettings.model_fields, *ServerSettings.model_fields], 1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        problems[name] = "llama.cpp's server has no setting %r%s" % (name, hint)
        continue
    try:
        owner.model_validate({**({"model": "m.gguf"} if owner is ModelSettings else {}), name: value})
    except ValidationError as exc:
        problems[name] = "llama.cpp refuses %r: %s" % (value, "; ".join(e["msg"] for e in exc.errors()))
print("QUANT_LLAMACPP " + json.dumps(problems))
"""


def llamacpp_setting_problems(python: str, args: dict[str, Any]) -> dict[str, str]:
    """{setting: why llama.cpp refuses it} for a variant's `llamacpp.args`, by llama-cpp-python's own settings
    models in its environment; FlagsUnknown where that environment cannot say."""
    import json
    import subprocess

    from perf.engines.flags import FlagsUnknown
    from perf.engines.llamacpp import llamacpp_flags

    flags = llamacpp_flags(args)   # the values as the server's command line gets them
    as_passed = {flags[i].removeprefix("--"): flags[i + 1] for i in range(0, len(flags), 2)}
    try:
        done = subprocess.run([python, "-c", _LLAMACPP_PROBE], input=json.dumps(as_passed), capture_output=True,
                              text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FlagsUnknown(f"{python} did not answer ({type(exc).__name__})") from None
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("QUANT_LLAMACPP ")), None)
    if line is None:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
        raise FlagsUnknown(f"{python} cannot describe llama.cpp's settings ({last})")
    return json.loads(line.removeprefix("QUANT_LLAMACPP "))


def check_llamacpp(variants: list[tuple[int, Variant]], run_recipe: bool = False) -> Found:
    """Each llama.cpp variant's server settings against llama.cpp's own settings models, in its environment
    (the recipe's `llamacpp.python` only where the user trusts the recipe)."""
    from perf.engines.flags import FlagsUnknown
    from perf.engines.llamacpp import resolve_llamacpp_python

    found = Found()
    for i, variant in variants:
        spec = variant.llamacpp
        if spec is None or not spec.args:
            continue
        where = ("variants", i, "llamacpp")
        if spec.python and not run_recipe:
            found.warnings.append((where + ("args",), f"llama.cpp settings not checked: that would run "
                                   f"llamacpp.python {spec.python!r}, which the recipe names; {TRUST_RECIPE} runs it"))
            continue
        python = resolve_llamacpp_python(spec.python)
        if not Path(python).is_file():
            continue   # the sweep refuses the variant before work: no llama.cpp environment
        try:
            problems = llamacpp_setting_problems(python, spec.args)
        except FlagsUnknown as exc:
            found.warnings.append((where + ("args",), f"llama.cpp settings not checked: {exc}"))
            continue
        found.errors += [(where + ("args", name), message) for name, message in problems.items()]
    return found
