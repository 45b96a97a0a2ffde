"""Which of the pool's GPUs a variant runs on. The pool is what CUDA_VISIBLE_DEVICES leaves the sweep (all GPUs
where it is unset, a GPU in MIG mode as its instances); a variant takes as many GPUs as its engine runs on
(tensor x pipeline x data parallel), all of one kind (a measurement names one kind of GPU): the kind that has
enough usable GPUs, least loaded first (the least memory held by other processes, then the lowest utilization,
then the lowest index). A GPU is usable where it has the free memory the engine's gpu_memory_utilization asks
for (vLLM refuses to start below it; where nvidia-smi cannot tell, [N/A], it is not refused for it), its compute
mode lets the engine in (not Prohibited, not Exclusive_Process with another process on it), and it reports no
uncorrectable ECC error. A MIG instance serves one process: CUDA shows a process one MIG instance only, so an
engine that needs several GPUs cannot run on MIG instances."""

from __future__ import annotations

from typing import Any

from perf.engines.gpus import Gpu, GpuProcess

DEFAULT_UTILIZATION = 0.9   # vLLM's gpu_memory_utilization default
PARALLEL_ARGS = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")
GIB = 1 << 30
DEVICE_ORDER = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}   # CUDA's indices as nvidia-smi's (CUDA's default: fastest first)


class NoGpuFree(RuntimeError):
    """Not enough GPUs of the pool are usable by the engine; the message says what each has."""


def _arg(args: dict[str, Any], name: str) -> Any:
    return args.get(name, args.get(name.replace("_", "-")))


def engine_gpu_count(args: dict[str, Any], names: tuple[str, ...] = PARALLEL_ARGS) -> int:
    """How many GPUs the engine runs on: the product of its parallel sizes (`names`)."""
    count = 1
    for name in names:
        value = _arg(args, name)
        count *= int(value) if isinstance(value, int | str) and str(value).isdigit() and int(value) > 0 else 1
    return count


def engine_ranks(args: dict[str, Any]) -> int:
    """The ranks of one engine replica (tensor x pipeline parallel): they share its weights and KV cache."""
    return engine_gpu_count(args, PARALLEL_ARGS[:2])


def engine_utilization(args: dict[str, Any]) -> float:
    value = _arg(args, "gpu_memory_utilization")
    try:
        return float(value) if value is not None else DEFAULT_UTILIZATION
    except (TypeError, ValueError):
        return DEFAULT_UTILIZATION


def _gib(value: int | None) -> str:
    return "?" if value is None else f"{value / GIB:.1f}"


def unusable(gpu: Gpu, utilization: float, held_by_others: int) -> str | None:
    """Why the engine cannot run on this GPU, or None where it can."""
    if gpu.compute_mode == "Prohibited":
        return "compute mode Prohibited"
    if gpu.compute_mode == "Exclusive_Process" and held_by_others:
        return "compute mode Exclusive_Process, another process on it"
    if gpu.ecc_uncorrected:
        return f"{gpu.ecc_uncorrected} uncorrectable ECC error(s)"
    free, total = gpu.memory_free_bytes, gpu.memory_total_bytes
    if free is not None and total is not None and free < utilization * total:
        return f"{_gib(free)} of {_gib(total)} GiB free"
    return None


def choose_gpus(pool: list[Gpu], count: int, utilization: float, processes: list[GpuProcess]) -> list[Gpu]:
    """`count` usable GPUs of one kind, least loaded first; NoGpuFree where no kind has that many."""
    if not pool:
        return []
    held = {g.uuid: sum(p.used_bytes for p in processes if p.gpu_uuid in (g.uuid, g.parent)) for g in pool}
    why = {g.uuid: unusable(g, utilization, held[g.uuid]) for g in pool}
    usable = sorted((g for g in pool if why[g.uuid] is None),
                    key=lambda g: (held[g.uuid], g.utilization or 0.0, g.index))
    if count > 1:
        usable = [g for g in usable if g.parent is None]
    for first in usable:
        same_kind = [g for g in usable if g.name == first.name]
        if len(same_kind) >= count:
            return same_kind[:count]
    seen = "; ".join(f"{g.index} {g.name}: " + (why[g.uuid] or f"{_gib(g.memory_free_bytes)} of "
                                                               f"{_gib(g.memory_total_bytes)} GiB free")
                     for g in pool)
    kinds = sorted({g.name for g in usable})
    mig = (" (a process sees one MIG instance: an engine on several GPUs needs whole GPUs)"
           if count > 1 and any(g.parent for g in pool) else "")
    raise NoGpuFree(f"the engine needs {count} GPU(s) of one kind with {utilization:.0%} of their memory free "
                    f"(gpu_memory_utilization){mig}; usable: {', '.join(kinds) or 'none'} ({seen}): free a GPU, "
                    "widen CUDA_VISIBLE_DEVICES, lower gpu_memory_utilization or the parallel sizes")
