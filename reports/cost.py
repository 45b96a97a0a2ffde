"""Dollars per million output tokens: the recipe's price of an accelerator-hour, times the accelerators a
variant's engine holds, over the output tokens it served per hour at a perf level."""

from __future__ import annotations

from core.recipe import variant_engine_args
from core.results import Results

# vLLM's parallelism flags: the engine holds their product of accelerators.
PARALLEL_ARGS = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")


def engine_args(results: Results, variant: str) -> dict:
    """The recipe's engine args with the variant's own on top, keys spelled with underscores."""
    recipe = results.recipe
    own = next((variant_engine_args(v) for v in recipe.get("variants", []) if v.get("name") == variant), {})
    merged = {**((recipe.get("engine") or {}).get("args") or {}), **own}
    return {str(k).replace("-", "_").lstrip("_"): v for k, v in merged.items()}


def gpus_held(results: Results, variant: str) -> int:
    args, held = engine_args(results, variant), 1
    for key in PARALLEL_ARGS:
        value = args.get(key)
        held *= int(value) if isinstance(value, int | str) and str(value).isdigit() and int(value) > 0 else 1
    return held


def usd_per_gpu_hour(results: Results) -> float | None:
    price = (results.recipe.get("cost") or {}).get("usd_per_gpu_hour")
    return float(price) if isinstance(price, int | float) and not isinstance(price, bool) and price > 0 else None


def usd_per_million_tokens(results: Results, variant: str, output_tokens_per_s: float | None) -> float | None:
    """None where the recipe names no price or nothing was served."""
    price = usd_per_gpu_hour(results)
    if price is None or not output_tokens_per_s or output_tokens_per_s <= 0:
        return None
    return price * gpus_held(results, variant) / (output_tokens_per_s * 3600) * 1e6
