"""Each variant's GPUs: chosen from the pool when the variant starts (perf/engines/gpu_choice.py) and exported
as CUDA_VISIBLE_DEVICES (their UUIDs) with CUDA_DEVICE_ORDER=PCI_BUS_ID for the variant's stages, so that every
child it starts (the quantizer, the server, the sensitivity ranking, the in-process scorer) inherits them and
numbers GPUs as nvidia-smi does, and its perf lock and foreign-load check look at them only. While pinned, the
context's `variant_gpu` is the identity of the GPUs chosen (name, count as the variant's own parallel sizes ask,
compute capability): the engine key and the variant's record name those. Where the engine is not on CUDA (or no
GPU is seen) nothing is pinned."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from core.recipe import Variant
from perf.engines.gpu_choice import DEVICE_ORDER, choose_gpus, engine_gpu_count, engine_utilization
from perf.engines.gpus import Gpu, gpu_identity, gpu_processes, visible_gpus
from quant.context import SweepContext

VISIBLE = "CUDA_VISIBLE_DEVICES"


def on_cuda(ctx: SweepContext) -> bool:
    return (ctx.engine_facts or {}).get("device") == "cuda" or ctx.device.startswith("cuda")


def variant_gpu_count(ctx: SweepContext, variant: Variant) -> int:
    """How many GPUs the variant's engine runs on: its own engine_args over the recipe's engine.args."""
    return engine_gpu_count({**ctx.recipe.engine.args, **variant.served_args})


@contextmanager
def pinned(ctx: SweepContext, variant: Variant) -> Iterator[list[Gpu]]:
    """CUDA_VISIBLE_DEVICES set to the variant's GPUs while the block runs, the user's value after; yields the
    GPUs ([]: nothing pinned). NoGpuFree where the pool has too few GPUs usable."""
    pool = visible_gpus() if on_cuda(ctx) else []
    if not pool:
        yield []
        return
    args = {**ctx.recipe.engine.args, **variant.served_args}
    chosen = choose_gpus(pool, engine_gpu_count(args), engine_utilization(args), gpu_processes() or [])
    settings = {VISIBLE: ",".join(g.uuid for g in chosen), **DEVICE_ORDER}
    before = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    facts = ctx.engine_facts or {}
    ctx.variant_gpu = gpu_identity([g.as_fact() for g in chosen], len(chosen), facts.get("driver"), facts.get("cuda"))
    try:
        yield chosen
    finally:
        ctx.variant_gpu = None
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
