"""A description of the engine server's argument parser, one entry per flag, and a mirror of it that parses a
value in this process: so that checking an engine argument's value needs no start of the engine's python
(importing vLLM takes seconds). The description is made in the engine's python (perf/engines/flags.py runs
this file's text there), and each flag's mirror is kept only where it gives the engine parser's own verdict,
word for word, on every value of SAMPLES and on each of the flag's choices; a flag whose type or action
cannot be described, or whose mirror differs, is marked `engine`: its values go to the engine's own parser.
Standard library only: this text runs in either python."""

from __future__ import annotations

import argparse
import json
import re

SAMPLES = ["1", "0", "-1", "7 ", "2.5", "1e3", "1k", "1K", "2.5k", "2.5K", "auto", "AUTO", "None", "", "true",
           "abc", "{}", '{"a": 1}', "{bad", "[1, 2]"]
FORMAT = 1   # of a description: one made by another version of this file is made again
ENGINE = {"kind": "engine"}   # values of this flag are parsed by the engine's own parser
_ACTIONS = {"_StoreAction": "store", "_StoreTrueAction": "store_true", "_StoreFalseAction": "store_false",
            "_StoreConstAction": "store_const", "_AppendAction": "append",
            "BooleanOptionalAction": "boolean"}


class Refused(Exception):
    """A parser's error (its message, as the engine's parser words it)."""


def describe(action: argparse.Action) -> dict:
    """One action of the engine's parser: what a mirror needs (in the engine's python)."""
    kind = _action_kind(action) if action.option_strings else None
    choices = list(action.choices) if action.choices is not None else None
    plain = choices is None or all(isinstance(c, (str, int, float)) and not isinstance(c, bool) for c in choices)
    return {"format": FORMAT, "option_strings": list(action.option_strings), "nargs": action.nargs, "action": kind,
            "choices": choices if plain else None,
            "kind": type_of(action.type) if kind is not None and plain else dict(ENGINE)}


def _action_kind(action: argparse.Action) -> str | None:
    name = _ACTIONS.get(type(action).__name__)
    return name if name is not None and type(action).__module__ == "argparse" else None


def type_of(convert) -> dict:
    """A type callable as a kind a mirror can rebuild; ENGINE where it cannot be told."""
    if convert is None or convert is str:
        return {"kind": "str"}
    if convert in (int, float) or convert is json.loads:
        return {"kind": convert.__name__}
    name = getattr(convert, "__name__", "")
    if name in ("human_readable_int", "human_readable_int_or_auto", "union_dict_and_str"):
        return {"kind": name}
    code, cells = getattr(convert, "__code__", None), getattr(convert, "__closure__", None) or ()
    wrapped = dict(zip(code.co_freevars, (c.cell_contents for c in cells))) if code else {}
    if name in ("_optional_type", "_parse_type") and "return_type" in wrapped:
        inner = type_of(wrapped["return_type"])
        if inner["kind"] != "engine":
            return {"kind": name, "of": inner, "repr": _without_addresses(repr(wrapped["return_type"]))}
    return dict(ENGINE)


def converter(kind: dict):
    """The callable a mirror parses with, named as the engine's (argparse names it in its messages)."""
    name = kind["kind"]
    if name in ("str", "int", "float"):
        return {"str": str, "int": int, "float": float}[name]
    if name == "loads":
        return json.loads
    if name == "human_readable_int":
        return human_readable_int
    if name == "human_readable_int_or_auto":
        return human_readable_int_or_auto
    if name == "union_dict_and_str":
        return union_dict_and_str
    inner = converter(kind["of"])

    def _parse_type(val):
        try:
            return inner(val)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"Value {val} cannot be converted to {kind['repr']}.") from exc

    def _optional_type(val):
        return None if val in ("", "None") else _parse_type(val)

    return _optional_type if name == "_optional_type" else _parse_type


def human_readable_int(value: str) -> int:
    value = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value)
    if match:
        number, suffix = match.groups()
        if suffix.islower():
            return int(float(number) * 10 ** (3 * "kmgt".index(suffix) + 3))
        try:
            return int(number) * 2 ** (10 * "KMGT".index(suffix) + 10)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(
                f"Decimals are not allowed with binary suffixes like {suffix}. Did you mean to use "
                f"{number}{suffix.lower()} instead?") from exc
    return int(value)


def human_readable_int_or_auto(value: str) -> int:
    value = value.strip()
    return -1 if value == "-1" or value.lower() == "auto" else human_readable_int(value)


def union_dict_and_str(val: str):
    if not re.match(r"(?s)^\s*{.*}\s*$", val):
        return str(val)
    return converter({"kind": "_optional_type", "of": {"kind": "loads"}, "repr": _without_addresses(repr(json.loads))})(val)


class _Mirror(argparse.ArgumentParser):
    def error(self, message):
        raise Refused(message)


def mirror_verdict(entry: dict, argv: list[str]) -> str | None:
    """The engine parser's verdict on argv (one flag and its values), from the flag's description: None
    where it takes it, else its message."""
    parser = _Mirror(add_help=False, prog="engine")
    options = {"nargs": entry["nargs"], "choices": entry["choices"], "type": converter(entry["kind"])}
    if entry["action"] in ("store_true", "store_false", "boolean"):
        options = {}
    elif entry["action"] == "store_const":
        options = {"const": None}
    parser.add_argument(*entry["option_strings"], dest="value", **options,
                        action=argparse.BooleanOptionalAction if entry["action"] == "boolean" else entry["action"])
    return verdict(parser, argv)


def verdict(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """None where parser takes argv, else its message (as one line, without the memory addresses a repr in it
    names: they differ from run to run)."""
    try:
        parser.parse_args(argv)
    except Refused as refused:
        lines = [line.strip() for line in str(refused.args[0]).splitlines()
                 if line.strip() and not line.strip().startswith("For further information")]
        return _without_addresses("; ".join(lines))
    except Exception as exc:  # noqa: BLE001 - the engine's parser may fail in its own ways: its message
        return _without_addresses(f"{type(exc).__name__}: {exc}")
    return None


def _without_addresses(text: str) -> str:
    return re.sub(r" at 0x[0-9a-fA-F]+", "", text)


def sample_argvs(entry: dict, flag: str) -> list[list[str]]:
    """The argvs a flag's mirror must answer as the engine's parser does before it is trusted."""
    if entry["action"] in ("store_true", "store_false", "store_const", "boolean"):
        return [[flag]]
    values = SAMPLES + [str(c) for c in entry["choices"] or []]
    argvs = [[flag, value] for value in values]
    if entry["nargs"] in ("+", "*"):
        argvs += [[flag, "1", value] for value in values] + [[flag]]
    return argvs
