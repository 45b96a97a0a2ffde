"""Scheme names and algorithm/scheme combinations, checked before any work against what the installed
compressed-tensors knows (its preset table, its QuantizationArgs validation), so that `scheme: W3A7` fails at
once with the names it may have meant, not after the baseline has been measured."""

from __future__ import annotations

import difflib
from functools import lru_cache
from typing import Any

from core.hashing import versions
from core.memo import remembered, source_digest
from core.recipe import Variant, WeightSpec

Problem = tuple[tuple, str]   # (where in the variant, e.g. ("groups", 1, "scheme"); message)


@lru_cache(maxsize=1)
def presets() -> dict:
    from compressed_tensors.quantization.quant_scheme import PRESET_SCHEMES
    return PRESET_SCHEMES


def preset_problem(name: str) -> str | None:
    """None for a preset compressed-tensors knows, else the error with the nearest names."""
    if name.upper() in presets():
        return None
    near = difflib.get_close_matches(name.upper(), list(presets()), n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(near)}?" if near else f"llmcompressor's presets: {', '.join(presets())}"
    return f"unknown scheme {name!r}; {hint}"


def preset(name: str):
    """The preset's QuantizationScheme (weights, input_activations) for Linear targets."""
    from compressed_tensors.quantization import preset_name_to_scheme
    return preset_name_to_scheme(name.upper(), ["Linear"])


def _schemes(variant: Variant) -> list[tuple[tuple, str | None, object]]:
    """(location, preset name or None, custom WeightSpec or None) for each scheme the variant uses."""
    if variant.groups:
        return [(("groups", i), g.scheme, g.weights) for i, g in enumerate(variant.groups)]
    if variant.scheme is not None or variant.weights is not None:
        return [((), variant.scheme, variant.weights)]
    return []


def weight_args(spec: WeightSpec) -> dict[str, Any]:
    """A WeightSpec as compressed-tensors QuantizationArgs fields."""
    args: dict[str, Any] = {"num_bits": spec.num_bits, "type": spec.type, "symmetric": spec.symmetric,
                            "strategy": spec.strategy, "dynamic": False}
    if spec.strategy == "group":
        if not spec.group_size:
            raise ValueError("weights.strategy group needs weights.group_size")
        args["group_size"] = spec.group_size
    return args


def weight_args_of(name: str | None, spec) -> object:
    """compressed-tensors QuantizationArgs of a preset's or a custom spec's weights (None: not quantized)."""
    if name is not None:
        return preset(name).weights
    from compressed_tensors.quantization import QuantizationArgs
    return QuantizationArgs(**weight_args(spec))


def weight_facts(name: str | None, spec: WeightSpec | None) -> dict | None:
    """What a weight's stored size depends on (num_bits, symmetric, strategy, group_size) for a preset or a
    custom spec; None where the preset leaves weights alone. A preset's is remembered per compressed-tensors
    version: a check of any variant with that preset imports nothing."""
    if name is None:
        return {k: v for k, v in weight_args(spec).items() if k in _WEIGHT_FACTS}

    def compute() -> dict | None:
        args = preset(name).weights
        return None if args is None else {k: getattr(args, k) for k in _WEIGHT_FACTS}
    return remembered("weight-facts", (name.upper(), versions("compressed-tensors"), source_digest(__file__)),
                      compute)


_WEIGHT_FACTS = ("num_bits", "symmetric", "strategy", "group_size")


def problems(variant: Variant) -> list[Problem]:
    """Everything wrong with the variant's schemes and algorithm that needs no model to see (remembered by
    what it reads: compressed-tensors is imported only for a combination not checked before)."""
    key = (_scheme_fields(variant), versions("compressed-tensors"), source_digest(__file__))
    return [(tuple(loc), message) for loc, message in remembered("schemes", key, lambda: _problems(variant))]


def _scheme_fields(variant: Variant) -> dict:
    """The fields _problems reads: the schemes (not the modules they apply to), algorithm and SmoothQuant."""
    return {"schemes": [(list(loc), name, spec and spec.model_dump(mode="json")) for loc, name, spec in
                        _schemes(variant)], "algorithm": variant.algorithm, "smoothquant": variant.smoothquant}


def quant_fields(variant: Variant) -> dict:
    """What a check of the variant's quantization reads: everything but its name, description and serving."""
    return variant.model_dump(mode="json", exclude={"name", "description", "engine_args", "kv_cache_dtype", "baseline"})


def _problems(variant: Variant) -> list[Problem]:
    found: list[Problem] = []
    schemes = _schemes(variant)
    for loc, name, spec in schemes:
        if name is not None and (message := preset_problem(name)):
            found.append((loc + ("scheme",), message))
        elif name is not None and not presets()[name.upper()]:
            found.append((loc + ("scheme",), f"{name} quantizes nothing: make the variant the baseline or drop it"))
        elif spec is not None:
            try:
                weight_args_of(None, spec)
            except (ValueError, NotImplementedError) as exc:   # compressed-tensors' own validation
                found.append((loc + ("weights",), f"compressed-tensors refuses these weights: {_first_line(exc)}"))
    if found:
        return found   # the combinations below need every scheme resolved
    resolved = [(loc, name, weight_args_of(name, spec), name is not None and preset(name).input_activations)
                for loc, name, spec in schemes]
    if variant.algorithm == "awq":
        for loc, name, weights, activations in resolved:
            if activations:
                found.append((loc + ("scheme",), f"algorithm awq needs a weight-only scheme (W4A16, W4A16_ASYM, "
                              f"W8A16, ... or `weights`), not {name}, which quantizes activations too"))
            elif weights is not None and weights.strategy == "tensor":
                found.append((loc + ("weights", "strategy"), "algorithm awq scales per channel (duo_scaling): "
                              "use strategy group or channel"))
        if variant.smoothquant is not None:
            found.append((("smoothquant",), "smoothquant and awq both rescale channels; pick one"))
    elif variant.smoothquant is not None and resolved and not any(act for *_, act in resolved):
        found.append((("smoothquant",), "SmoothQuant moves activation outliers into the weights; it only helps a "
                      "scheme that quantizes activations (W8A8, FP8, ...), not a weight-only one"))
    return found


def check(variant: Variant) -> None:
    """Raise ValueError naming every problem (for callers outside a sweep's validation, e.g. `python -m quantize`)."""
    found = problems(variant)
    if found:
        raise ValueError("; ".join(f"{'.'.join(map(str, loc)) or variant.name}: {msg}" for loc, msg in found))


def _first_line(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    meaningful = [line for line in lines if not line.startswith(("For further information", "1 validation error"))]
    return (meaningful or lines or [type(exc).__name__])[-1][:300]


def describe_variant(variant: Variant) -> str:
    """One line for the sweep's log: scheme(s), algorithm, SmoothQuant, what stays 16-bit."""
    if variant.recipe:
        return "verbatim llmcompressor recipe"
    if variant.groups:
        scheme = " + ".join(f"{g.scheme or f'W{g.weights.num_bits}A16 custom'} on {', '.join(g.targets)}"
                            for g in variant.groups)
    else:
        scheme = variant.scheme or f"W{variant.weights.num_bits}A16 custom"
    extra = f" + SmoothQuant {variant.smoothquant}" if variant.smoothquant else ""
    return f"{scheme}, {variant.algorithm.upper()}{extra}, 16-bit: {', '.join(variant.ignore) or 'none'}"
