"""Memory accounting from the checkpoint alone: weights, KV cache per token, and what fits on an accelerator.

KV cache per token = 2 (K and V) x layers x KV heads x head dim x bytes per element: grouped-query attention
(fewer KV heads) shrinks it, an FP8 KV cache halves it; weight quantization does not touch it.
"""

from __future__ import annotations

import json
from pathlib import Path

GIB = 1 << 30


def kv_element_bytes(engine_args: dict, model_dtype_bytes: int = 2) -> int:
    kv_dtype = str(engine_args.get("kv_cache_dtype", "auto"))
    return 1 if kv_dtype.startswith("fp8") else model_dtype_bytes


def kv_bytes_per_token(config: dict, element_bytes: int = 2) -> int:
    text = config.get("text_config", config)   # multimodal configs nest the language model's
    heads = text["num_attention_heads"]
    kv_heads = text.get("num_key_value_heads") or heads
    head_dim = text.get("head_dim") or text["hidden_size"] // heads
    return 2 * text["num_hidden_layers"] * kv_heads * head_dim * element_bytes


def capacity(weights_bytes: int, kv_per_token: int, seq_tokens: int, accelerator_gib: float,
             utilization: float) -> dict:
    """What fits beside the weights in `utilization` of the accelerator (vLLM's gpu_memory_utilization),
    ignoring activations and CUDA graphs: an upper bound, comparable across variants."""
    budget = int(accelerator_gib * GIB * utilization) - weights_bytes
    max_tokens = max(0, budget // kv_per_token)
    return {"accelerator_gib": accelerator_gib, "utilization": utilization, "kv_budget_bytes": max(0, budget),
            "max_kv_tokens": max_tokens, "seq_tokens": seq_tokens, "max_sequences": max_tokens // seq_tokens}


DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2}


def account(checkpoint: Path, weights_bytes: int, engine_args: dict, seq_tokens: int, accelerator_gib: float,
            utilization: float, served_dtype: str = "bfloat16") -> dict:
    """served_dtype: what the engine runs the model in (its KV cache too, unless kv_cache_dtype says otherwise;
    float32 on a CPU without AVX-512)."""
    config = json.loads((Path(checkpoint) / "config.json").read_text())
    per_token = kv_bytes_per_token(config, kv_element_bytes(engine_args, DTYPE_BYTES.get(served_dtype, 2)))
    return {"weights_bytes": weights_bytes, "kv_bytes_per_token": per_token,
            **capacity(weights_bytes, per_token, seq_tokens, accelerator_gib, utilization)}
