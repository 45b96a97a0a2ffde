"""The model's modules as the quantization libraries see them, without reading a weight: every module's name
and class names, and each Linear's shape, built once on the meta device from config.json and remembered by
its content (a recipe checked later needs neither torch nor transformers). Module entries of a recipe
(`ignore`, a group's `targets`) are matched here as compressed-tensors matches them: a full module name, a
`re:` regex matched from the start of the name, or a class name."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from core.hashing import file_digest, versions
from core.memo import remembered, source_digest

LAYER = re.compile(r"^(.*?layers\.)(\d+)\.(.+)$")


@lru_cache(maxsize=4)
def meta_model(model_dir: str):
    """The model's modules with no storage behind them (seconds for any size; config.json only)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_dir)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


@dataclass(frozen=True)
class Modules:
    """names: every module's name in model order; classes: a module's torch class names (its own and its
    bases'); linears: {Linear name: (out_features, in_features)}."""
    names: tuple[str, ...]
    classes: dict[str, tuple[str, ...]]
    linears: dict[str, tuple[int, int]]

    def matches(self, name: str, entry: str) -> bool:
        """compressed-tensors' rule (match_name or class match); `re:` entries must compile (entry_problem)."""
        if entry.startswith("re:"):
            return re.match(entry[3:], name) is not None
        return entry == name or entry in self.classes[name] or (entry == "Linear" and "LinearBase" in
                                                                self.classes[name])

    def linears_matching(self, entry: str) -> list[str]:
        return [n for n in self.linears if self.matches(n, entry)]


def model_modules(model_dir: Path) -> Modules:
    """The Modules of the model whose config.json is in model_dir (remembered by that file's content)."""
    key = (file_digest(Path(model_dir) / "config.json"), versions("transformers", "torch"), source_digest(__file__))
    found = remembered("modules", key, lambda: _inventory(str(model_dir)))
    return Modules(tuple(n for n, _ in found["modules"]),
                   {n: tuple(found["classes"][c]) for n, c in found["modules"]},
                   {n: (out, inp) for n, (out, inp) in found["linears"].items()})


def _inventory(model_dir: str) -> dict:
    import torch

    model = meta_model(model_dir)
    classes: dict[str, list[str]] = {}
    modules, linears = [], {}
    for name, module in model.named_modules():
        kind = type(module).__name__
        classes.setdefault(kind, [c.__name__ for c in type(module).__mro__
                                  if isinstance(c, type) and issubclass(c, torch.nn.Module)])
        modules.append((name, kind))
        if isinstance(module, torch.nn.Linear):
            linears[name] = (module.out_features, module.in_features)
    return {"modules": modules, "classes": classes, "linears": linears}


def entry_problem(modules: Modules, entry: str, what: str) -> str | None:
    """None where `entry` (of `what`, e.g. "ignore") matches a Linear of the model, else why not, with the
    names it may have meant: a typo would otherwise quietly quantize a layer meant to stay 16-bit."""
    if entry.startswith("re:"):
        try:
            re.compile(entry[3:])
        except re.error as exc:
            return f"{what} entry '{entry}' is not a valid regular expression: {exc}"
    if modules.linears_matching(entry):
        return None
    others = [n for n in modules.names if n and modules.matches(n, entry)]
    if others:
        return (f"{what} entry '{entry}' matches no Linear, only {_few(others)}: entries apply to each Linear by "
                f"its own name or class; {_hint(modules, entry)}")
    return f"{what} entry '{entry}' matches no module of the model; {_hint(modules, entry)}"


def _hint(modules: Modules, entry: str) -> str:
    if not entry.startswith("re:"):
        near = difflib.get_close_matches(entry, [n for n in modules.names if n] + _class_names(modules), n=3,
                                         cutoff=0.6)
        tails = [n for n in modules.linears if n.endswith("." + entry)]
        if tails:
            return f"a name is a module's full name: did you mean 're:.*\\.{re.escape(entry)}$' ({len(tails)} Linears)?"
        if near:
            return f"did you mean {', '.join(near)}?"
    return f"the model's Linears: {linear_kinds(modules)}"


def _class_names(modules: Modules) -> list[str]:
    return sorted({c for names in modules.classes.values() for c in names})


def linear_kinds(modules: Modules) -> str:
    """e.g. "lm_head; in each of 4 layers (model.layers.N.): self_attn.q_proj, ..., mlp.down_proj"."""
    alone, per_layer, layers = [], [], set()
    for name in modules.linears:
        match = LAYER.match(name)
        if match is None:
            alone.append(name)
        else:
            layers.add((match.group(1), match.group(2)))
            if match.group(3) not in per_layer:
                per_layer.append(match.group(3))
    prefixes = sorted({p for p, _ in layers})
    parts = alone + ([f"in each of {len(layers)} layers ({', '.join(p + 'N.' for p in prefixes)}): "
                      f"{', '.join(per_layer)}"] if per_layer else [])
    return "; ".join(parts)


def _few(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
