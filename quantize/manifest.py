"""Facts about a saved quantized checkpoint, read back from its files (not from what we asked for)."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from quant.hashing import versions

MANIFEST_NAME = "quant_manifest.json"
LIBRARIES = ("torch", "llmcompressor", "compressed-tensors", "transformers")
# Tensors that store a quantized weight; weight_shape (a 2-element shape record) is metadata.
_WEIGHT_STORAGE = ("weight", "weight_packed", "weight_scale", "weight_zero_point", "weight_g_idx",
                   "weight_global_scale")


def library_versions() -> dict[str, str | None]:
    return versions(*LIBRARIES)


def quantization_config(ckpt: Path) -> dict[str, Any]:
    config = json.loads((ckpt / "config.json").read_text())
    return config.get("quantization_config") or {}


def describe_args(args: dict[str, Any] | None, what: str) -> str:
    """One quantization-args block in words, e.g. "weights int4 sym group 128 (static)"."""
    if not args:
        return f"{what} 16-bit"
    sym = "sym" if args.get("symmetric", True) else "asym"
    strategy = args.get("strategy") or "tensor"
    if strategy == "group":
        strategy = f"group {args.get('group_size')}"
    elif strategy == "block":
        strategy = f"block {args.get('block_structure')}"
    when = "dynamic" if args.get("dynamic") else "static"
    return f"{what} {args.get('type', 'int')}{args.get('num_bits')} {sym} {strategy} ({when})"


def describe_scheme(qconfig: dict[str, Any]) -> str:
    """All config groups in words; "none" for a checkpoint without quantization_config."""
    groups = qconfig.get("config_groups") or {}
    if not groups:
        return "none"
    parts = []
    for name, group in sorted(groups.items()):
        desc = "; ".join([describe_args(group.get("weights"), "weights"),
                          describe_args(group.get("input_activations"), "activations")])
        parts.append(f"{name} -> {group.get('targets')}: {desc} [{group.get('format') or qconfig.get('format')}]")
    return " | ".join(parts)


def size_on_disk(ckpt: Path) -> tuple[int, int]:
    """(all files, *.safetensors only) in bytes."""
    files = [p for p in ckpt.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), sum(p.stat().st_size for p in files if p.suffix == ".safetensors")


def weight_bits(ckpt: Path, ignored: list[str]) -> dict[str, Any]:
    """Bits per weight, counting codes plus scales/zero-points, over the quantized Linear layers and
    over all Linear layers (ignored ones stored in 16 bits included)."""
    from safetensors import safe_open

    stored: dict[str, dict[str, tuple[list[int], int]]] = defaultdict(dict)
    for shard in sorted(ckpt.glob("*.safetensors")):
        with safe_open(shard, "pt") as fh:
            for key in fh.keys():
                module, _, leaf = key.rpartition(".")
                if leaf in _WEIGHT_STORAGE or leaf == "weight_shape":
                    t = fh.get_slice(key)
                    shape = t.get_shape()
                    shape_value = fh.get_tensor(key).tolist() if leaf == "weight_shape" else []
                    nbytes = math.prod(shape) * _dtype_bytes(t.get_dtype())
                    stored[module][leaf] = (shape_value or shape, nbytes)
    q_bits = q_weights = 0
    for module, tensors in stored.items():
        if "weight_scale" not in tensors:
            continue
        shape = _weight_shape(tensors)
        q_weights += math.prod(shape)
        q_bits += 8 * sum(nbytes for leaf, (_, nbytes) in tensors.items() if leaf != "weight_shape")
    dense_bits = dense_weights = 0
    for module in ignored:
        if "weight" in stored.get(module, {}):
            shape, nbytes = stored[module]["weight"]
            dense_weights += math.prod(shape)
            dense_bits += 8 * nbytes
    return {
        "quantized_linear_weights": q_weights,
        "bits_per_weight_quantized": round(q_bits / q_weights, 4) if q_weights else None,
        "bits_per_weight_all_linear": (round((q_bits + dense_bits) / (q_weights + dense_weights), 4)
                                       if q_weights else None),
    }


def _weight_shape(tensors: dict[str, tuple[list[int], int]]) -> list[int]:
    """The unpacked weight's shape: recorded (int packing), as stored, or, for NVFP4's uint8 packing, which
    records no shape, two 4-bit codes per byte."""
    if "weight_shape" in tensors:
        return tensors["weight_shape"][0]
    if "weight" in tensors:
        return tensors["weight"][0]
    rows, packed_cols = tensors["weight_packed"][0]
    return [rows, packed_cols * 2]


def _dtype_bytes(dtype: str) -> int:
    """Bytes per element of a safetensors dtype name: F8_E4M3 -> 1, BF16 -> 2, I32 -> 4, BOOL -> 1."""
    if dtype.startswith(("F8", "U8", "I8", "BOOL")):
        return 1
    return int(dtype.lstrip("BFIU")) // 8


def checkpoint_facts(ckpt: Path) -> dict[str, Any]:
    qconfig = quantization_config(ckpt)
    ignored = list(qconfig.get("ignore") or [])
    total, weights = size_on_disk(ckpt)
    return {
        "scheme_description": describe_scheme(qconfig),
        "format": qconfig.get("format"),
        "ignore_expanded": ignored,
        "size_bytes": total,
        "weights_bytes": weights,
        **weight_bits(ckpt, ignored),
    }


def write_manifest(ckpt: Path, manifest: dict[str, Any]) -> Path:
    path = ckpt / MANIFEST_NAME
    path.write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n")
    return path
