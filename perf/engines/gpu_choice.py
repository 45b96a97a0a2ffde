"""Which of the pool's GPUs a variant runs on. The pool is what CUDA_VISIBLE_DEVICES leaves the sweep (all GPUs
where it is unset); a variant takes as many GPUs as its engine runs on (tensor x pipeline x data parallel),
each with enough free memory for the engine's gpu_memory_utilization (vLLM refuses to start below it), of the
kind of the pool's first GPU (a measurement names one kind of GPU), least loaded first: the least memory held
by other processes, then the lowest utilization, then the lowest index."""

from __future__ import annotations

from typing import Any

from perf.engines.gpus import Gpu, GpuProcess

DEFAULT_UTILIZATION = 0.9   # vLLM's gpu_memory_utilization default
PARALLEL_ARGS = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")
GIB = 1 << 30


class NoGpuFree(RuntimeError):
    """Not enough GPUs of the pool have the memory the engine needs; the message says what each has."""


def _arg(args: dict[str, Any], name: str) -> Any:
    return args.get(name, args.get(name.replace("_", "-")))


def engine_gpu_count(args: dict[str, Any]) -> int:
    count = 1
    for name in PARALLEL_ARGS:
        value = _arg(args, name)
        count *= int(value) if isinstance(value, int | str) and str(value).isdigit() and int(value) > 0 else 1
    return count


def engine_utilization(args: dict[str, Any]) -> float:
    value = _arg(args, "gpu_memory_utilization")
    try:
        return float(value) if value is not None else DEFAULT_UTILIZATION
    except (TypeError, ValueError):
        return DEFAULT_UTILIZATION


def choose_gpus(pool: list[Gpu], count: int, utilization: float, processes: list[GpuProcess]) -> list[Gpu]:
    """`count` GPUs of the pool's first kind, each with utilization x its total free, least loaded first;
    NoGpuFree where fewer fit."""
    if not pool:
        return []
    kind = pool[0].name
    held = {g.uuid: sum(p.used_bytes for p in processes if p.gpu_uuid == g.uuid) for g in pool}
    fits = [g for g in pool if g.name == kind and g.memory_free_bytes >= utilization * g.memory_total_bytes]
    if len(fits) < count:
        seen = "; ".join(f"{g.index} {g.name}: {g.memory_free_bytes / GIB:.1f} of {g.memory_total_bytes / GIB:.1f} "
                         f"GiB free" for g in pool)
        raise NoGpuFree(f"the engine needs {count} {kind} GPU(s) with {utilization:.0%} of their memory free "
                        f"(gpu_memory_utilization); {len(fits)} ha{'s' if len(fits) == 1 else 've'} it ({seen}): "
                        "free a GPU, widen CUDA_VISIBLE_DEVICES, or lower gpu_memory_utilization")
    return sorted(fits, key=lambda g: (held[g.uuid], g.utilization or 0.0, g.index))[:count]
