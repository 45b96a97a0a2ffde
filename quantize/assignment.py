"""Which scheme each Linear gets, checked before quantizing. Two mistakes would otherwise surface only at
engine start, minutes later: a module matched by two groups, and shards that vLLM fuses into one layer
(q/k/v, gate/up) given different schemes, or some kept in 16-bit and some not."""

from __future__ import annotations


# Linears vLLM fuses into one (Llama-style names); a checkpoint may not quantize them differently.
FUSED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


def fused_layer(name: str) -> str | None:
    """The fused Linear vLLM runs a shard in ("...self_attn.q_proj" -> "...self_attn.qkv_proj"), else None."""
    parent, _, leaf = name.rpartition(".")
    return next((f"{parent}.{fused}" for fused, shards in FUSED.items() if leaf in shards), None)


def assign(model, groups: dict[str, list[str]], ignore: list[str]) -> dict[str, str | None]:
    """{Linear name: the group that quantizes it, or None where it stays 16-bit}. A group that names a module
    (exact name or `re:`) wins over one that matches only its class (`Linear`), as in compressed-tensors and
    vLLM alike; two groups matching one module at the same level are an error (the libraries could differ)."""
    import torch
    from compressed_tensors.utils import match_name, match_named_modules

    owner: dict[str, str | None] = {n: None for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    level: dict[str, int] = {}   # 0: matched by name, 1: by class only
    for group, targets in groups.items():
        for name, _ in match_named_modules(model, targets, ignore):
            if name not in owner:
                continue
            by = 0 if any(match_name(name, t) for t in targets) else 1
            if owner[name] is not None and level[name] == by:
                raise ValueError(f"{name} matches the targets of both {owner[name]} and {group}; "
                                 "make the groups' targets disjoint")
            if owner[name] is None or by < level[name]:
                owner[name], level[name] = group, by
    return owner


def check_fused(owner: dict[str, str | None]) -> None:
    """Shards of one fused layer must share a scheme (vLLM: "Found different quantization schemes for the
    shards of ... qkv_proj")."""
    by_layer: dict[str, dict[str, str | None]] = {}
    for name, group in owner.items():
        if layer := fused_layer(name):
            by_layer.setdefault(layer, {})[name.rpartition(".")[2]] = group
    for layer, got in sorted(by_layer.items()):
        if len(set(got.values())) > 1:
            shards = FUSED[layer.rpartition(".")[2]]
            parts = ", ".join(f"{s} {got[s] or '16-bit'}" for s in shards if s in got)
            raise ValueError(f"{layer}: vLLM fuses {'/'.join(shards)} into one layer, so they need one scheme; "
                             f"got {parts}")


def check(model, groups: dict[str, list[str]], ignore: list[str]) -> dict[str, str | None]:
    owner = assign(model, groups, ignore)
    if not any(owner.values()):
        raise ValueError("no Linear module matches any group's targets (after `ignore`)")
    check_fused(owner)
    return owner
