"""Verbatim llmcompressor recipes (a variant's `recipe:`), read as llmcompressor reads them
(`<name>_stage: {<name>_modifiers: {ModifierName: {argument: value}}}`) and checked before work against the
installed llmcompressor's modifiers: their names and the arguments each takes. The modifiers are read from
llmcompressor's own registry once per llmcompressor version, in a child process (importing llmcompressor
takes seconds), and remembered: a recipe checked later imports nothing."""

from __future__ import annotations

import difflib
import json
import subprocess
import sys

import yaml

from core.hashing import versions
from core.memo import remembered, source_digest

# Run in this environment's python: every modifier llmcompressor's factory can create, with its arguments.
_INDEX = r"""
import json, logging, warnings
warnings.simplefilter("ignore")
logging.disable(logging.WARNING)
from llmcompressor.modifiers import ModifierFactory
from llmcompressor.modifiers.quantization import QuantizationMixin
ModifierFactory.refresh()
index = {}
for registry in (ModifierFactory._main_registry, ModifierFactory._experimental_registry):
    for name, cls in registry.items():
        fields = cls.model_fields.items()
        index.setdefault(name, {
            "arguments": sorted({n for f_name, f in fields for n in (f_name, f.alias) if n}),
            "required": [[n for n in (f_name, f.alias) if n] for f_name, f in fields if f.is_required()],
            "quantizes": issubclass(cls, QuantizationMixin)})
broken = {name: f"{type(err).__name__}: {err}" for name, err in ModifierFactory._errors.items()}
print("QUANT_MODIFIERS " + json.dumps({"modifiers": index, "broken": broken}))
"""


class ModifiersUnknown(Exception):
    """llmcompressor's modifiers could not be read (it is not installed, or fails to import)."""


def modifier_index() -> dict:
    """{"modifiers": {name: {"arguments": [names], "required": [[name, alias]], "quantizes": bool}},
    "broken": {name: error}}."""
    return remembered("llmcompressor-modifiers", (versions("llmcompressor"), source_digest(__file__)), _read_index)


def _read_index() -> dict:
    try:
        proc = subprocess.run([sys.executable, "-c", _INDEX], capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ModifiersUnknown(f"{type(exc).__name__}: {exc}") from None
    for line in proc.stdout.splitlines():
        if line.startswith("QUANT_MODIFIERS "):
            return json.loads(line.removeprefix("QUANT_MODIFIERS "))
    last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    raise ModifiersUnknown(f"llmcompressor's modifiers could not be read ({last[:200]})")


def recipe_problems(text: str, index: dict) -> list[str]:
    """Every problem llmcompressor would meet building the recipe's modifiers, one message each."""
    try:
        try:
            recipe = json.loads(text)
        except ValueError:
            recipe = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return [f"not YAML: {str(exc).splitlines()[0]}"]
    if not isinstance(recipe, dict):
        return ["not a mapping of stages (`<name>_stage: {<name>_modifiers: {Modifier: {...}}}`)"]
    problems, order = [], []
    for stage, groups in recipe.items():
        if not (str(stage).endswith("_stage") and isinstance(groups, dict)):
            continue
        for group, modifiers in groups.items():
            if not (str(group).endswith("_modifiers") and isinstance(modifiers, dict)):
                continue
            for name, arguments in modifiers.items():
                where = f"{stage}.{group}.{name}"
                problems += [f"{where}: {p}" for p in _modifier_problems(str(name), arguments, index)]
                order.append(str(name))
    if not order:
        return ["names no modifier: llmcompressor reads them from `<name>_stage: {<name>_modifiers: "
                "{ModifierName: {argument: value}}}` and would change nothing"]
    known = index["modifiers"]
    for i, name in enumerate(order):
        if name == "AWQModifier" and not any(known.get(n, {}).get("quantizes") for n in order[i + 1:]):
            problems.append("AWQModifier needs a quantizing modifier after it (e.g. QuantizationModifier, "
                            "GPTQModifier): AWQ only rescales")
    return problems


def _modifier_problems(name: str, arguments, index: dict) -> list[str]:
    known = index["modifiers"]
    if name in index["broken"]:
        return [f"llmcompressor cannot load this modifier here ({index['broken'][name][:200]})"]
    if name not in known:
        near = difflib.get_close_matches(name, list(known), n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(near)}?" if near else f"its modifiers: {', '.join(sorted(known))}"
        return [f"llmcompressor has no modifier {name!r}; {hint}"]
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return [f"its arguments must be a mapping, not {arguments!r}"]
    takes = known[name]["arguments"]
    problems = []
    for argument in arguments:
        if argument not in takes:
            near = difflib.get_close_matches(str(argument), [a for a in takes if not a.endswith("_")], n=3,
                                             cutoff=0.6)
            hint = f"; did you mean {', '.join(near)}?" if near else ""
            problems.append(f"{name} takes no argument {argument!r}{hint}")
    missing = [names[0] for names in known[name]["required"] if not any(n in arguments for n in names)]
    if missing:
        problems.append(f"{name} needs {', '.join(missing)}")
    return problems
