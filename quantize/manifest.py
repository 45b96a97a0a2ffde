"""Facts about a saved quantized checkpoint, read back from its files (not from what we asked for).

Two families of checkpoint: compressed-tensors (llmcompressor; config_groups in quantization_config) and the
GPTQ / AWQ formats of GPTQModel, AutoGPTQ and AutoAWQ (quant_method gptq or awq; qweight/qzeros/scales)."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from core.hashing import versions

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
    if _is_gptq_awq(qconfig):
        return describe_gptq_awq(qconfig)
    groups = qconfig.get("config_groups") or {}
    if not groups:
        return "none"
    parts = []
    for name, group in sorted(groups.items()):
        desc = "; ".join([describe_args(group.get("weights"), "weights"),
                          describe_args(group.get("input_activations"), "activations")])
        parts.append(f"{name} -> {group.get('targets')}: {desc} [{group.get('format') or qconfig.get('format')}]")
    return " | ".join(parts)


def describe_gptq_awq(qconfig: dict[str, Any]) -> str:
    """A GPTQ- or AWQ-format config in words, e.g. "GPTQ int4 sym group 128, desc_act false [gptq format]"."""
    method = qconfig["quant_method"]
    group = qconfig.get("group_size", 128)
    shape = "channel" if group in (-1, None) else f"group {group}"
    fmt = gptq_awq_format(qconfig).replace("-", " ")
    if method == "awq":   # AWQ records asymmetry as zero_point (AutoAWQ's default: true)
        sym = "asym" if qconfig.get("zero_point", True) else "sym"
        desc = f"AWQ int{qconfig.get('bits')} {sym} {shape} [{fmt} format]"
    else:
        sym = "sym" if qconfig.get("sym", True) else "asym"
        desc_act = "true" if qconfig.get("desc_act") else "false"
        desc = f"GPTQ int{qconfig.get('bits')} {sym} {shape}, desc_act {desc_act} [{fmt} format]"
    return desc + (", lm_head quantized" if qconfig.get("lm_head") else "")


def gptq_awq_format(qconfig: dict[str, Any]) -> str:
    """"awq-gemm" (AWQ's kernel layout: version, or format in GPTQModel's configs), else the GPTQ format."""
    if qconfig["quant_method"] == "awq":
        return f"awq-{qconfig.get('version') or qconfig.get('format') or 'gemm'}"
    return qconfig.get("checkpoint_format") or qconfig.get("format") or "gptq"


def size_on_disk(ckpt: Path) -> tuple[int, int]:
    """(all files, *.safetensors only) in bytes."""
    files = [p for p in ckpt.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), sum(p.stat().st_size for p in files if p.suffix == ".safetensors")


def _stored(ckpt: Path, wanted) -> dict[str, dict[str, tuple[list[int], int]]]:
    """{module: {leaf: (shape, bytes)}} for the tensors `wanted(module, leaf, shape)` picks, read from the
    safetensors headers (a `weight_shape` record is read for its value: the unpacked weight's shape)."""
    from safetensors import safe_open

    stored: dict[str, dict[str, tuple[list[int], int]]] = defaultdict(dict)
    for shard in sorted(ckpt.glob("*.safetensors")):
        with safe_open(shard, "pt") as fh:
            for key in fh.keys():
                module, _, leaf = key.rpartition(".")
                t = fh.get_slice(key)
                shape = t.get_shape()
                if wanted(module, leaf, shape):
                    nbytes = math.prod(shape) * _dtype_bytes(t.get_dtype())
                    value = fh.get_tensor(key).tolist() if leaf == "weight_shape" else shape
                    stored[module][leaf] = (value, nbytes)
    return stored


def _bits(q_bits: int, q_weights: int, dense: list[tuple[list[int], int]]) -> dict[str, Any]:
    """Bits per weight over the quantized Linears, and over all of them with the `dense` (shape, bytes) ones."""
    dense_bits, dense_weights = 8 * sum(n for _, n in dense), sum(math.prod(shape) for shape, _ in dense)
    return {
        "quantized_linear_weights": q_weights,
        "bits_per_weight_quantized": round(q_bits / q_weights, 4) if q_weights else None,
        "bits_per_weight_all_linear": (round((q_bits + dense_bits) / (q_weights + dense_weights), 4)
                                       if q_weights else None),
    }


def weight_bits(ckpt: Path, ignored: list[str]) -> dict[str, Any]:
    """Bits per weight, counting codes plus scales/zero-points, over the quantized Linear layers and
    over all Linear layers (ignored ones stored in 16 bits included)."""
    stored = _stored(ckpt, lambda module, leaf, shape: leaf in _WEIGHT_STORAGE or leaf == "weight_shape")
    q_bits = q_weights = 0
    for module, tensors in stored.items():
        if "weight_scale" not in tensors:
            continue
        q_weights += math.prod(_weight_shape(tensors))
        q_bits += 8 * sum(nbytes for leaf, (_, nbytes) in tensors.items() if leaf != "weight_shape")
    dense = [stored[m]["weight"] for m in ignored if "weight" in stored.get(m, {})]
    return _bits(q_bits, q_weights, dense)


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


def _is_gptq_awq(qconfig: dict[str, Any]) -> bool:
    return qconfig.get("quant_method") in ("gptq", "awq")


# Linear layers GPTQ/AWQ formats store packed: 32/bits codes per int32 in qweight, along the input dimension for
# GPTQ ((in*bits/32, out)), along the output dimension for AWQ ((in, out*bits/32)).
_PACKED_STORAGE = ("qweight", "qzeros", "scales", "g_idx")


def _is_embedding(module: str) -> bool:
    leaf = module.rpartition(".")[2]
    return "embed" in leaf or leaf in ("wte", "wpe")


def gptq_awq_weight_bits(ckpt: Path, qconfig: dict[str, Any]) -> dict[str, Any]:
    """weight_bits() for GPTQ/AWQ formats: bits of qweight+qzeros+scales+g_idx over the unpacked weight count;
    kept_16bit lists the Linear weights stored dense (2-D `.weight` tensors, embeddings excepted)."""
    per_int = 32 // int(qconfig.get("bits") or 4)
    stored = _stored(ckpt, lambda module, leaf, shape: leaf in _PACKED_STORAGE or (
        leaf == "weight" and len(shape) == 2 and not _is_embedding(module)))
    q_bits = q_weights = 0
    for tensors in stored.values():
        if "qweight" in tensors:
            rows, cols = tensors["qweight"][0]
            q_weights += rows * cols * per_int
            q_bits += 8 * sum(nbytes for leaf, (_, nbytes) in tensors.items() if leaf in _PACKED_STORAGE)
    kept = sorted(m for m, tensors in stored.items() if "weight" in tensors and "qweight" not in tensors)
    return {"kept_16bit": kept, **_bits(q_bits, q_weights, [stored[m]["weight"] for m in kept])}


def _gptq_awq_facts(ckpt: Path, qconfig: dict[str, Any]) -> dict[str, Any]:
    bits = gptq_awq_weight_bits(ckpt, qconfig)
    total, weights = size_on_disk(ckpt)
    return {
        "scheme_description": describe_gptq_awq(qconfig),
        "format": gptq_awq_format(qconfig),
        "ignore_expanded": bits.pop("kept_16bit"),
        "size_bytes": total,
        "weights_bytes": weights,
        **bits,
    }


def checkpoint_facts(ckpt: Path) -> dict[str, Any]:
    qconfig = quantization_config(ckpt)
    if _is_gptq_awq(qconfig):
        return _gptq_awq_facts(ckpt, qconfig)
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
