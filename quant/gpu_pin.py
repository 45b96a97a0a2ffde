"""Each variant's GPUs: chosen from the pool when the variant starts (perf/engines/gpu_choice.py) and exported
as CUDA_VISIBLE_DEVICES for the variant's stages, so that every child it starts (the quantizer, the server, the
sensitivity ranking, the in-process scorer) inherits them, and its perf lock and foreign-load check look at
them only. Where the engine is not on CUDA (or no GPU is seen) nothing is pinned."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from core.recipe import Variant
from perf.engines.gpu_choice import choose_gpus, engine_gpu_count, engine_utilization
from perf.engines.gpus import gpu_processes, visible_gpus
from quant.context import SweepContext

VISIBLE = "CUDA_VISIBLE_DEVICES"


def on_cuda(ctx: SweepContext) -> bool:
    return (ctx.engine_facts or {}).get("device") == "cuda" or ctx.device.startswith("cuda")


@contextmanager
def pinned(ctx: SweepContext, variant: Variant) -> Iterator[list[str]]:
    """CUDA_VISIBLE_DEVICES set to the variant's GPUs (their UUIDs) while the block runs, the user's value after;
    yields the UUIDs ([]: nothing pinned). NoGpuFree where the pool has too few GPUs free."""
    pool = visible_gpus() if on_cuda(ctx) else []
    if not pool:
        yield []
        return
    args = {**ctx.recipe.engine.args, **(variant.engine_args or {})}
    chosen = [g.uuid for g in choose_gpus(pool, engine_gpu_count(args), engine_utilization(args),
                                          gpu_processes() or [])]
    before = os.environ.get(VISIBLE)
    os.environ[VISIBLE] = ",".join(chosen)
    try:
        yield chosen
    finally:
        if before is None:
            os.environ.pop(VISIBLE, None)
        else:
            os.environ[VISIBLE] = before
