"""Group sizes against the model's Linear shapes, before any work. A group size must divide the in_features
of every Linear it quantizes (compressed-tensors refuses the checkpoint otherwise, after calibration: "columns
not divisible by group_size"). The model is built on the meta device from its config.json: the exact module
names, classes and shapes llmcompressor will see, without reading a weight."""

from __future__ import annotations

import math
import re
from collections import defaultdict
from pathlib import Path

from core.hashing import file_digest, versions
from core.memo import remembered, source_digest
from core.recipe import Variant
from quantize.modules import LAYER, meta_model
from quantize.schemes import Problem, preset, weight_args_of

GROUP_SIZES = (1024, 512, 256, 128, 64, 32, 16, 8)   # the sizes suggested when one does not fit


def scheme_groups(variant: Variant) -> dict[str, tuple[tuple, list[str], object]]:
    """{group: (its place in the recipe, its targets, its weights' QuantizationArgs)} as llmcompressor runs it."""
    if variant.groups:
        return {f"group_{i}": (("groups", i), g.targets, weight_args_of(g.scheme, g.weights))
                for i, g in enumerate(variant.groups)}
    return {"quantized": (("scheme",) if variant.scheme else ("weights", "group_size"), ["Linear"],
                          weight_args_of(variant.scheme, variant.weights))}


def unfit_layers(model, variant: Variant) -> dict[str, list[tuple[str, int]]]:
    """{group: [(Linear name, in_features)]} where the group's size does not divide in_features; the same
    rule as llmcompressor's (group and tensor_group strategies, in_features >= group size)."""
    from quantize.assignment import assign

    groups = scheme_groups(variant)
    owner = assign(model, {g: targets for g, (_, targets, _) in groups.items()}, list(variant.ignore))
    unfit: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for name, group in owner.items():
        args = groups[group][2] if group else None
        size = _group_size(args)
        columns = model.get_submodule(name).in_features
        if size and columns >= size and columns % size:
            unfit[group].append((name, columns))
    return dict(unfit)


def problems(model_dir: Path, variant: Variant) -> tuple[list[Problem], list[str]]:
    """(errors, notes): the assignment of Linears to schemes (quantize/assignment.py) and group sizes that do
    not fit; under an `unfit_groups` policy, a note saying what it does instead. Remembered by the content of
    config.json (all the meta model is built from) and the variant's fields it reads: a cached sweep, or a
    variant differing in anything else, builds no model and imports no torch."""
    from quantize import assignment, schemes

    read = variant.model_dump(mode="json", include={"scheme", "weights", "groups", "ignore", "unfit_groups"})
    key = (file_digest(Path(model_dir) / "config.json"), read,
           versions("transformers", "compressed-tensors", "torch"),
           source_digest(__file__, assignment.__file__, schemes.__file__))
    errors, notes = remembered("shapes", key, lambda: _problems(model_dir, variant))
    return [(tuple(loc), message) for loc, message in errors], notes


def _problems(model_dir: Path, variant: Variant) -> tuple[list[Problem], list[str]]:
    from quantize.assignment import check

    model = meta_model(str(model_dir))
    assignment = ("groups",) if variant.groups else ("ignore",)
    try:
        unfit = unfit_layers(model, variant)
    except ValueError as exc:
        return [(assignment, str(exc))], []
    try:
        planned, record = with_policy(model, variant)
    except ValueError as exc:
        return [(("unfit_groups",), str(exc))], []
    try:
        check(model, {g: t for g, (_, t, _) in scheme_groups(planned).items()}, list(planned.ignore))
    except ValueError as exc:
        return [(assignment, str(exc))], []
    if record:
        return [], [describe_unfit(record)]
    groups = scheme_groups(variant)
    errors = []
    for group, layers in unfit.items():
        loc, _, args = groups[group]
        size = _group_size(args)
        fit = fitting_sizes(model, variant, group)
        advice = (f"group sizes that fit every Linear it quantizes: {', '.join(map(str, fit))}" if fit else
                  "no power-of-two group size fits every Linear it quantizes; use strategy: channel")
        errors.append((loc, f"group size {size} does not divide the in_features of {len(layers)} quantized "
                            f"Linears: {summarise([n for n, _ in layers], model)}; {advice}, or set "
                            f"unfit_groups: keep (16-bit){'' if variant.groups else ' or largest_fitting'}"))
    return errors, []


def fitting_sizes(model, variant: Variant, group: str) -> list[int]:
    """Group sizes (largest first) that divide the in_features of every Linear `group` quantizes."""
    from quantize.assignment import assign

    owner = assign(model, {g: t for g, (_, t, _) in scheme_groups(variant).items()}, list(variant.ignore))
    common = math.gcd(*(model.get_submodule(n).in_features for n, g in owner.items() if g == group))
    return [s for s in GROUP_SIZES if common % s == 0][:3]


def with_policy(model, variant: Variant) -> tuple[Variant, dict | None]:
    """The variant as its `unfit_groups` policy quantizes it, and the manifest's record of what changed
    (None when nothing did). `keep`: unfit Linears join `ignore`. `largest_fitting`: they form config groups
    of their own, with the largest group size below the scheme's that divides their in_features; those
    groups name the modules, so they win over the scheme's class target `Linear` in compressed-tensors and
    in vLLM (which matches a fused qkv_proj/gate_up_proj by its shards' names before its class)."""
    unfit = sorted((n, c) for layers in unfit_layers(model, variant).values() for n, c in layers)
    if not unfit or variant.unfit_groups == "error":
        return variant, None
    names = [n for n, _ in unfit]
    record = {"policy": variant.unfit_groups, "summary": summarise(names, model), "modules": names}
    if variant.unfit_groups == "keep":
        return variant.model_copy(update={"ignore": [*variant.ignore, *_targets(names, model)]}), record
    return _largest_fitting(model, variant, unfit, record)


def _largest_fitting(model, variant: Variant, unfit: list[tuple[str, int]], record: dict) -> tuple[Variant, dict]:
    from core.recipe import SchemeGroup, WeightSpec

    (_, _, args), = scheme_groups(variant).values()
    if args.strategy != "group" or (variant.scheme and preset(variant.scheme).input_activations is not None):
        raise ValueError(f"unfit_groups largest_fitting needs int weights in groups and no activation "
                         f"quantization; {variant.scheme or 'these weights'} has other; use unfit_groups: keep")
    by_size: dict[int, list[str]] = defaultdict(list)
    for name, columns in unfit:
        size = next((s for s in GROUP_SIZES if s < args.group_size and columns % s == 0), None)
        if size is None:
            raise ValueError(f"no group size of {', '.join(map(str, GROUP_SIZES[::-1]))} divides {name} "
                             f"(in_features {columns}); use unfit_groups: keep")
        by_size[size].append(name)
    base = WeightSpec(num_bits=args.num_bits, symmetric=args.symmetric, strategy="group",
                      group_size=args.group_size, type=str(getattr(args.type, "value", args.type)))
    groups = [SchemeGroup(targets=["Linear"], scheme=variant.scheme, weights=variant.weights)]
    by_size = dict(sorted(by_size.items(), reverse=True))
    groups += [SchemeGroup(targets=_targets(names, model), weights=base.model_copy(update={"group_size": size}))
               for size, names in by_size.items()]
    record["group_sizes"] = {str(size): summarise(names, model) for size, names in by_size.items()}
    return variant.model_copy(update={"scheme": None, "weights": None, "groups": groups}), record


def describe_unfit(record: dict) -> str:
    if record["policy"] == "keep":
        return (f"unfit_groups keep: {len(record['modules'])} Linears stay 16-bit, their in_features not divisible "
                f"by the group size: {record['summary']}")
    sizes = "; ".join(f"group size {size} for {what}" for size, what in record["group_sizes"].items())
    return f"unfit_groups largest_fitting: {len(record['modules'])} Linears quantized with smaller groups: {sizes}"


def apply_unfit_policy(model_dir: Path, variant: Variant) -> tuple[Variant, dict | None]:
    """What the variant quantizes after its `unfit_groups` policy, and the manifest's record of it."""
    if variant.unfit_groups == "error" or not (variant.scheme or variant.weights or variant.groups):
        return variant, None
    return with_policy(meta_model(str(model_dir)), variant)


def summarise(names: list[str], model) -> str:
    """e.g. "self_attn.q_proj, mlp.gate_proj in 30 layers (in_features 576)": one entry per module kind."""
    kinds: dict[tuple[str, int], int] = defaultdict(int)
    for name in names:
        match = LAYER.match(name)
        kinds[(match.group(3) if match else name, model.get_submodule(name).in_features)] += 1
    by_shape: dict[tuple[int, int], list[str]] = defaultdict(list)
    for (kind, columns), count in kinds.items():
        by_shape[(count, columns)].append(kind)
    return "; ".join(f"{', '.join(kinds_)}" + (f" in {count} layers" if count > 1 else "") + f" (in_features {columns})"
                     for (count, columns), kinds_ in by_shape.items())


def _targets(names: list[str], model) -> list[str]:
    """Module names as `ignore`/`targets` entries: one regex per module kind (e.g. every layer's
    self_attn.q_proj) where all of a kind are named, else the names themselves."""
    import torch

    every: dict[str, int] = defaultdict(int)
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and (match := LAYER.match(name)):
            every[match.group(3)] += 1
    unfit: dict[str, list[str]] = defaultdict(list)
    for name in names:
        match = LAYER.match(name)
        unfit[match.group(3) if match else name].append(name)
    entries = []
    for kind, members in unfit.items():
        whole = len(members) == every.get(kind, -1)
        entries += [f"re:.*layers\\.\\d+\\.{re.escape(kind)}$"] if whole else members
    return entries


def _group_size(args) -> int | None:
    if args is None or args.strategy not in ("group", "tensor_group"):
        return None
    return args.group_size
