"""The NVIDIA GPUs this host has, as nvidia-smi reports them: which the sweep's processes may use
(CUDA_VISIBLE_DEVICES), their memory and compute capability, and which processes hold memory on them.
None of it imports torch or a CUDA library: the facts come from nvidia-smi, or are absent without it."""

from __future__ import annotations

import os
import subprocess
from dataclasses import asdict, dataclass

MIB = 1 << 20
BF16_COMPUTE_CAP = 8.0   # Ampere and newer have bfloat16 kernels; vLLM falls back to float16 below it


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str
    memory_total_bytes: int
    memory_free_bytes: int
    compute_cap: float | None

    @property
    def bf16(self) -> bool:
        return self.compute_cap is not None and self.compute_cap >= BF16_COMPUTE_CAP

    def as_fact(self) -> dict:
        return {**asdict(self), "bf16": self.bf16}


def nvidia_smi(*query: str) -> str | None:
    """nvidia-smi's CSV answer (no header, no units); None without nvidia-smi or where it fails."""
    try:
        out = subprocess.run(["nvidia-smi", *query, "--format=csv,noheader,nounits"], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:   # "[N/A]", "[Not Supported]"
        return None


def parse_gpus(csv_text: str) -> list[Gpu]:
    """`--query-gpu=index,uuid,name,memory.total,memory.free,compute_cap` -> the GPUs (memory in MiB)."""
    gpus = []
    for line in csv_text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 5 or not parts[0].isdigit():
            continue
        total, free = _number(parts[3]), _number(parts[4])
        gpus.append(Gpu(int(parts[0]), parts[1], parts[2], int((total or 0) * MIB), int((free or 0) * MIB),
                        _number(parts[5]) if len(parts) > 5 else None))
    return gpus


def visible(gpus: list[Gpu], env: dict[str, str] | None = None) -> list[Gpu]:
    """The GPUs CUDA_VISIBLE_DEVICES leaves to the sweep's processes (by index or UUID; unset: all, empty: none)."""
    value = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return gpus
    chosen = []
    for item in (v.strip() for v in value.split(",")):
        if not item or item == "-1":
            break   # CUDA stops at the first invalid entry
        match = [g for g in gpus if (str(g.index) == item if item.isdigit() else g.uuid.startswith(item))]
        if not match:
            break
        chosen += match
    return chosen


def visible_gpus(env: dict[str, str] | None = None) -> list[Gpu]:
    """This host's GPUs that the sweep's processes may use; [] without nvidia-smi."""
    out = nvidia_smi("--query-gpu=index,uuid,name,memory.total,memory.free,compute_cap")
    return visible(parse_gpus(out), env) if out else []


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    gpu_uuid: str
    used_bytes: int


def parse_gpu_processes(csv_text: str) -> list[GpuProcess]:
    """`--query-compute-apps=pid,gpu_uuid,used_memory` -> the processes holding memory on a GPU."""
    found = []
    for line in csv_text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and parts[0].isdigit():
            found.append(GpuProcess(int(parts[0]), parts[1], int((_number(parts[2]) or 0) * MIB)))
    return found


def gpu_processes() -> list[GpuProcess] | None:
    """Every process holding memory on an NVIDIA GPU of this host; None without nvidia-smi."""
    out = nvidia_smi("--query-compute-apps=pid,gpu_uuid,used_memory")
    return None if out is None else parse_gpu_processes(out)
