"""The dtype variants run in, decided by the device the engine serves on: on a CPU as perf/engines/cpu_isa.py
says; on a GPU as vLLM's own `auto` decides it (vllm/config: the checkpoint's dtype; a float32 checkpoint is
served in the GPU's first supported dtype, bfloat16 where it has bfloat16 kernels and float16 below compute
capability 8.0; a bfloat16 checkpoint on a GPU without bfloat16 in float16). An explicit engine.dtype is kept
everywhere."""

from __future__ import annotations

import json
from pathlib import Path

from perf.engines.cpu_isa import compute_dtype

GPU_DEVICES = ("cuda", "rocm")
_NAMES = {"bfloat16": "bfloat16", "float16": "float16", "half": "float16", "float32": "float32",
          "float": "float32"}


def on_gpu(facts: dict | None) -> bool:
    return (facts or {}).get("device") in GPU_DEVICES


def checkpoint_dtype(model_dir: Path) -> str | None:
    """The dtype a checkpoint's config.json declares (`torch_dtype`, or transformers 5's `dtype`); None if none."""
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    value = config.get("torch_dtype") or config.get("dtype") or (config.get("text_config") or {}).get("dtype")
    return _NAMES.get(str(value).removeprefix("torch.")) if value else None


def gpu_auto_dtype(checkpoint: str | None, bf16_supported: bool) -> str:
    """vLLM's `auto` on a GPU: the checkpoint's dtype, float32 downcast to the preferred dtype, and bfloat16
    replaced by float16 where the GPU has no bfloat16."""
    preferred = "bfloat16" if bf16_supported else "float16"
    dtype = checkpoint or "float32"   # a config without a dtype: transformers loads float32; vLLM downcasts it
    if dtype == "float32":
        return preferred
    if dtype == "bfloat16" and not bf16_supported:
        return "float16"
    return dtype


def served_dtype(requested: str, facts: dict | None, model_dir: Path | None) -> str:
    """The dtype the engine runs every variant in (and the in-process fallback on the same device): see above."""
    facts = facts or {}
    if requested != "auto" or not on_gpu(facts):
        return compute_dtype(requested, facts.get("device") == "cpu", facts.get("cpu_isa"))
    gpus = facts.get("gpus") or []
    # GPUs unknown (no nvidia-smi), or their compute capability (driver 470): taken for current ones
    bf16 = all(g.get("bf16") or ("compute_cap" in g and g["compute_cap"] is None) for g in gpus)
    return gpu_auto_dtype(checkpoint_dtype(model_dir) if model_dir else None, bf16)
