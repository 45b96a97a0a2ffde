"""The flags the installed engine's server accepts, read from its own argument parser and cached per engine
version, so a recipe's `engine.args` are checked before any work (a flag vLLM does not have would otherwise
reach it: some builds serve anyway, silently leaving the default in force); and each argument's value, as the
sweep would pass it, parsed as that same parser parses it, so a value the engine refuses is a recipe error
before any variant is measured: in this process, by a mirror of each flag described from the parser and
checked against it (perf/engines/flag_types.py), or, for the few flags whose types only the engine knows, by
the engine's parser itself (its verdicts cached per engine version and value).

`python -m perf.engines.flags` describes the installed engine's parser ahead (`make setup` runs it)."""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from perf.engines import flag_types
from perf.engines.vllm import ENTRYPOINT

PROBE_TIMEOUT_S = 600   # importing vLLM takes tens of seconds on a busy small machine

# Run in the engine's python, after flag_types.py's text: start the server's entry point as `python -m` would,
# stop it where it parses its arguments, describe what its parser accepts (each flag's mirror checked against
# the parser itself) where asked, and print the parser's verdict on each argv given. No import path of vLLM's is
# named, so this follows whatever parser the installed version builds.
_PROBE = (Path(flag_types.__file__).read_text() + r"""
import runpy, sys, warnings
warnings.simplefilter("ignore")
class Captured(Exception):
    pass
originals = {name: getattr(argparse.ArgumentParser, name) for name in ("parse_args", "parse_known_args")}
def capturing(name):
    def parse(self, *args, **kwargs):
        if any("--max-model-len" in a.option_strings for a in self._actions):
            raise Captured(self)
        return originals[name](self, *args, **kwargs)
    return parse
for name in originals:
    setattr(argparse.ArgumentParser, name, capturing(name))
asked = json.loads(sys.stdin.read() or "{}")
sys.argv = [ENTRYPOINT]
try:
    runpy.run_module(ENTRYPOINT, run_name="__main__", alter_sys=True)
except Captured as captured:
    parser = captured.args[0]
    for name, original in originals.items():
        setattr(argparse.ArgumentParser, name, original)
    def refuse(message):
        raise Refused(message)
    parser.error = refuse
    parser.exit = lambda status=0, message=None: refuse(message or f"exit {status}")
    def parsed(argv):
        with warnings.catch_warnings():
            return verdict(parser, argv)
    def plain(values):
        return [str(v) for v in values] if values is not None and all(
            isinstance(v, (str, int, float)) for v in values) else None
    flags = {}
    for action in parser._actions if asked.get("describe") else ():
        entry = describe(action)
        if entry["kind"] != ENGINE and any(parsed(argv) != mirror_verdict(entry, argv)
                                           for argv in sample_argvs(entry, action.option_strings[0])):
            entry["kind"] = dict(ENGINE)
        for option in action.option_strings:
            if option.startswith("--"):
                flags[option] = {"takes_value": action.nargs != 0, "choices": plain(action.choices),
                                 "type": getattr(action.type, "__name__", None), "mirror": entry}
    print("QUANT_ENGINE_FLAGS " + json.dumps(flags))
    print("QUANT_ENGINE_VALUES " + json.dumps({json.dumps(argv): parsed(argv) for argv in asked.get("argvs", [])}))
    sys.exit(0)
sys.exit("the server's entry point returned without parsing its arguments")
""").replace("ENTRYPOINT", repr(ENTRYPOINT))

# Flags the sweep sets itself on every server it starts.
SET_BY_THE_SWEEP = {
    "model": "the sweep serves each variant's checkpoint",
    "served_model_name": "the sweep names each server after its variant",
    "host": "the sweep serves on 127.0.0.1",
    "port": "the sweep picks a free port",
    "dtype": "set `engine.dtype` instead",
}


class FlagsUnknown(Exception):
    """The engine's flags could not be read (its python has no server entry point we can probe)."""


def cache_dir() -> Path:
    return Path(os.environ.get("QUANT_ENGINE_FLAGS_DIR") or Path.home() / ".cache" / "quant-suite" / "engine-flags")


def engine_flags_known(python: str, facts: dict, env: dict[str, str] | None = None,
                       args: list[dict[str, Any]] = (), announce: bool = False) -> dict[str, dict]:
    """{"--flag": {takes_value, choices, type, mirror}} of the engine at `python` (facts:
    perf.engines.vllm.engine_facts; mirror: the flag's description, perf/engines/flag_types.py), cached per
    engine distribution and version; FlagsUnknown when the probe cannot read them. Where the probe runs, it
    parses `args` too (refused_values then finds their verdicts cached): one start of the engine's python, not
    two. announce: say on stderr that the parser was described (seconds, once per engine version)."""
    cached = _cache_file(facts)
    flags = _read(cached)
    if flags and all(spec.get("mirror", {}).get("format") == flag_types.FORMAT for spec in flags.values()):
        return flags
    argvs = _argvs(args)
    started = time.monotonic()
    flags, verdicts = _probe(python, env, [json.loads(a) for a in sorted({a for some in argvs for a in some.values()})],
                             describe=True)
    if announce:
        print(f"note: described {engine_name(facts)}'s argument parser in {time.monotonic() - started:.0f} s, once "
              "per engine version (`make setup` does it ahead)", file=sys.stderr, flush=True)
    _write(cached, flags)
    if verdicts:
        values = _cache_file(facts, "values")
        _write(values, {**(_read(values) or {}), **verdicts})
    return flags


def refused_values(python: str, facts: dict, env: dict[str, str] | None, args: list[dict[str, Any]],
                   flags: dict[str, dict], announce: bool = False) -> list[dict[str, str]]:
    """For each dict of engine arguments, {key: the engine parser's message} for the values it refuses, each
    argument parsed alone as the sweep passes it (perf.engines.vllm.engine_flags): by the flag's mirror of the
    engine's parser (flags: engine_flags_known) in this process, or, for a flag whose type only the engine
    knows, by the engine's own parser, its verdicts cached per engine version and argument: the engine's
    python is started only for such values not parsed before, all of them in one run (announce: saying so on
    stderr). FlagsUnknown when the parser cannot be reached."""
    argvs = _argvs(args)
    verdicts = {argv: mirrored for argv in {a for some in argvs for a in some.values()}
                if (mirrored := _mirrored(json.loads(argv), flags)) is not _UNDESCRIBED}
    cached = _cache_file(facts, "values")
    verdicts = {**(_read(cached) or {}), **verdicts}
    missing = sorted({argv for some in argvs for argv in some.values()} - verdicts.keys())
    if missing:
        if announce:
            named = sorted({json.loads(m)[0] for m in missing})
            print(f"note: asking {engine_name(facts)}'s own argument parser about {', '.join(named)} (types only "
                  "it knows; its answers are kept)", file=sys.stderr, flush=True)
        _, found = _probe(python, env, [json.loads(m) for m in missing])
        verdicts.update(found)
        _write(cached, {**(_read(cached) or {}), **found})
    return [{key: verdicts[argv] for key, argv in some.items() if verdicts.get(argv)} for some in argvs]


_UNDESCRIBED = object()


def _mirrored(argv: list[str], flags: dict[str, dict]):
    """The verdict of argv's flag's mirror on it; _UNDESCRIBED where only the engine's parser can tell: a type
    or action it could not describe, or several values for a flag that takes one (the engine's parser has
    positional arguments that might take them)."""
    entry = (flags.get(argv[0]) or {}).get("mirror")
    if entry is None or entry["kind"] == flag_types.ENGINE or (len(argv) > 2 and entry["nargs"] not in ("+", "*")):
        return _UNDESCRIBED
    return flag_types.mirror_verdict(entry, argv)


def engine_name(facts: dict) -> str:
    return f"{facts.get('distribution') or 'the engine'} {facts.get('version') or ''}".strip()


def _argvs(args) -> list[dict[str, str]]:
    """Per dict of arguments, {key: the argv the sweep passes for it, as JSON} (None: not passed)."""
    from perf.engines.vllm import engine_flags
    return [{key: json.dumps(engine_flags({key: value})) for key, value in some.items() if value is not None}
            for some in args]


def _read(path: Path | None) -> dict | None:
    try:
        return json.loads(path.read_text()) if path is not None else None
    except (OSError, ValueError):
        return None   # missing or damaged: asked again


def _write(path: Path | None, content: dict) -> None:
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(content, sort_keys=True))
        partial.replace(path)
    except OSError:
        pass   # an unwritable cache only costs the next validation the probe


def _cache_file(facts: dict, kind: str = "") -> Path | None:
    if not facts.get("distribution") or not facts.get("version"):
        return None
    name = f"{facts['distribution']}-{facts['version']}{'.' + kind if kind else ''}.json".replace(os.sep, "_")
    return cache_dir() / name


def _probe(python: str, env: dict[str, str] | None, argvs: list[list[str]],
           describe: bool = False) -> tuple[dict[str, dict], dict]:
    """(the server's flags, described where asked, else {}; {argv as JSON: the parser's message or None}) from
    one run of the engine's python."""
    try:
        proc = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                              env={**os.environ, **(env or {})},
                              input=json.dumps({"describe": describe, "argvs": argvs}))
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FlagsUnknown(f"{type(exc).__name__}: {exc}") from None
    found = {}
    for line in proc.stdout.splitlines():
        for kind in ("FLAGS", "VALUES"):
            if line.startswith(f"QUANT_ENGINE_{kind} "):
                found[kind] = json.loads(line.removeprefix(f"QUANT_ENGINE_{kind} "))
    if "FLAGS" in found:
        return found["FLAGS"], found.get("VALUES", {})
    last = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["no output"])[-1]
    raise FlagsUnknown(f"{python} did not report its server's flags ({last[:200]})")


def flag_problems(args: dict[str, Any], flags: dict[str, dict]) -> list[tuple[str, str]]:
    """(key, message) per engine argument the server would refuse or misread, as perf.engines.vllm.engine_flags
    passes it: an unknown flag (with the nearest names), a value where the flag takes none or none where it
    takes one, a value outside its choices or not of its numeric type, and a flag the sweep sets itself."""
    names = sorted({f[2:].replace("-", "_") for f in flags if not f.startswith("--no-")})
    problems = []
    for key, value in args.items():
        flag = "--" + key.replace("_", "-").lstrip("-")
        name = flag[2:].replace("-", "_")
        if name in SET_BY_THE_SWEEP:
            problems.append((key, f"not an engine argument of a recipe: {SET_BY_THE_SWEEP[name]}"))
        elif flag not in flags:
            near = difflib.get_close_matches(name, names, n=3, cutoff=0.75)
            hint = f"; did you mean {', '.join(near)}?" if near else ""
            problems.append((key, f"the engine has no flag {flag}{hint}"))
        elif value is not None:
            message = _value_problem(flag, value, flags)
            if message:
                problems.append((key, message))
    return problems


def _value_problem(flag: str, value: Any, flags: dict[str, dict]) -> str | None:
    spec = flags[flag]
    if value is False:
        return None if f"--no-{flag[2:]}" in flags else f"{flag} has no --no- form: leave it out instead of false"
    if value is True:
        return f"{flag} takes a value, not true" if spec["takes_value"] else None
    if not spec["takes_value"]:
        return f"{flag} is a switch: give true or false, not {value!r}"
    values = value if isinstance(value, (list, tuple)) else [value]
    if spec["choices"] is not None and spec["type"] in (None, "str") and not isinstance(value, dict):
        wrong = [str(v) for v in values if str(v) not in spec["choices"]]
        if wrong:
            return f"{wrong[0]!r} is not one of {flag}'s choices: {', '.join(spec['choices'])}"
    numeric = {"int": int, "float": float}.get(spec["type"])
    for v in values:
        if numeric is not None and not isinstance(v, bool):
            try:
                numeric(str(v))
            except ValueError:
                return f"{flag} takes {'an integer' if numeric is int else 'a number'}, not {v!r}"
    return None


def main() -> int:
    """Describe the serving environment's parser into the cache (`make setup`): validation then parses
    engine argument values without starting the engine's python."""
    from perf.engines.vllm import engine_facts, resolve_engine_python

    python = resolve_engine_python(None)
    facts = engine_facts(python)
    try:
        flags = engine_flags_known(python, facts)
    except FlagsUnknown as exc:
        print(f"setup: the engine's argument parser not described ({exc}); validation describes it on first use")
        return 1
    undescribed = sorted(f for f, spec in flags.items() if spec["mirror"]["kind"] == flag_types.ENGINE)
    print(f"setup: {engine_name(facts)}'s argument parser described ({len(flags)} flags; values of "
          f"{len(undescribed)} go to the engine's own parser) in {_cache_file(facts) or 'no cache: version unknown'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
