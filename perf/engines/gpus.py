"""The NVIDIA GPUs this host has, as nvidia-smi reports them: which the sweep's processes may use
(CUDA_VISIBLE_DEVICES, by index, GPU- or MIG- UUID), their memory, load and compute capability, the driver, and
which processes hold memory on them. None of it imports torch or a CUDA library: the facts come from nvidia-smi,
or are absent without it. Which of them a variant runs on is perf/engines/gpu_choice.py."""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass

from perf.engines import nvidia_smi as nvidia_smi_run

MIB = 1 << 20
BF16_COMPUTE_CAP = 8.0   # Ampere and newer have bfloat16 kernels; vLLM falls back to float16 below it


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str
    memory_total_bytes: int | None     # None: nvidia-smi says [N/A] (MIG mode, some containers)
    memory_free_bytes: int | None
    compute_cap: float | None          # None: unknown (driver 470 has no compute_cap field)
    utilization: float | None = None   # percent of the last sample period a kernel ran (nvidia-smi utilization.gpu)
    parent: str | None = None          # a MIG instance: the UUID of the GPU it is a slice of
    compute_mode: str | None = None    # Default, Exclusive_Process or Prohibited
    ecc_uncorrected: int | None = None   # uncorrectable ECC errors since the driver loaded; None: not reported
    mig: bool = False                  # a GPU in MIG mode: CUDA sees its instances, not the GPU

    @property
    def bf16(self) -> bool:
        return self.compute_cap is not None and self.compute_cap >= BF16_COMPUTE_CAP

    def as_fact(self) -> dict:
        return {**asdict(self), "bf16": self.bf16}


def nvidia_smi(*query: str) -> str | None:
    """nvidia-smi's CSV answer (no header, no units); None without nvidia-smi or where it fails or hangs."""
    return nvidia_smi_run.csv(*query)


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:   # "[N/A]", "[Not Supported]", "[Unknown Error]"
        return None


def _mib(text: str) -> int | None:
    number = _number(text)
    return None if number is None else int(number * MIB)


GPU_FIELDS = ["index", "uuid", "name", "memory.total", "memory.free", "compute_cap", "utilization.gpu",
              "compute_mode", "ecc.errors.uncorrected.volatile.total", "mig.mode.current"]


def parse_gpus(csv_text: str, fields: list[str] | None = None) -> list[Gpu]:
    """The answer to a query of `fields` (GPU_FIELDS) -> the GPUs (memory in MiB); a field nvidia-smi left out or
    answered [N/A] / [Not Supported] is unknown (None), never 0."""
    fields = fields or GPU_FIELDS
    gpus = []
    for line in csv_text.strip().splitlines():
        row = dict(zip(fields, (p.strip() for p in line.split(","))))
        if not row.get("index", "").isdigit() or "uuid" not in row:
            continue
        ecc = _number(row.get("ecc.errors.uncorrected.volatile.total", ""))
        mode = row.get("compute_mode", "")
        gpus.append(Gpu(int(row["index"]), row["uuid"], row.get("name", "unknown"), _mib(row.get("memory.total", "")),
                        _mib(row.get("memory.free", "")), _number(row.get("compute_cap", "")),
                        _number(row.get("utilization.gpu", "")), None,
                        mode if mode and not mode.startswith("[") else None,
                        None if ecc is None else int(ecc), row.get("mig.mode.current") == "Enabled"))
    return gpus


# `nvidia-smi -L`: "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-…)" then, under a GPU in MIG mode, one line per
# instance: "  MIG 3g.40gb     Device  0: (UUID: MIG-…)" (profiles such as 1g.10gb+me carry a suffix).
_GPU_LINE = re.compile(r"^GPU (\d+): .*\(UUID: (GPU-[^)]+)\)")
_MIG_LINE = re.compile(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[^)]+)\)")
_MIG_MEMORY = re.compile(r"\.(\d+)gb\b")


def mig_instances(list_text: str, gpus: list[Gpu]) -> list[Gpu]:
    """The MIG instances `nvidia-smi -L` lists, as GPUs of their own: the parent's name and capability with the
    profile, memory from the profile (3g.40gb, 1g.10gb+me: 40 and 10 GB; nvidia-smi's queries give no free
    figure per instance, so free is unknown), utilization unknown, the parent's compute mode and ECC errors."""
    by_index, found, parent = {g.index: g for g in gpus}, [], None
    for line in list_text.splitlines():
        if m := _GPU_LINE.match(line):
            parent = by_index.get(int(m[1]))
        elif (m := _MIG_LINE.match(line)) and parent is not None:
            size = _MIG_MEMORY.search(m[1])
            total = int(size[1]) * 10**9 if size else None
            found.append(Gpu(int(m[2]), m[3], f"{parent.name} MIG {m[1]}", total, None, parent.compute_cap,
                             None, parent.uuid, parent.compute_mode, parent.ecc_uncorrected))
    return found


def visible(gpus: list[Gpu], env: dict[str, str] | None = None, migs: list[Gpu] | None = None) -> list[Gpu]:
    """The GPUs CUDA_VISIBLE_DEVICES leaves to the sweep's processes (by index, GPU- or MIG- UUID or a prefix of
    one; unset: all, a GPU in MIG mode as its instances; empty: none). A MIG- entry is that instance (`migs`,
    from mig_instances)."""
    value = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return [one for g in gpus for one in ([m for m in migs or [] if m.parent == g.uuid] if g.mig else [g])]
    chosen = []
    for item in (v.strip() for v in value.split(",")):
        if not item or item == "-1":
            break   # CUDA stops at the first invalid entry
        pool = (migs or []) if item.startswith("MIG-") else gpus
        match = [g for g in pool if (str(g.index) == item if item.isdigit() else g.uuid.startswith(item))]
        if not match:
            break
        chosen += match[:1]
    return chosen


def visible_gpus(env: dict[str, str] | None = None) -> list[Gpu]:
    """This host's GPUs that the sweep's processes may use (a GPU in MIG mode as its instances); [] without
    nvidia-smi or where it fails."""
    answer = nvidia_smi_run.query("gpu", GPU_FIELDS)
    if answer is None:
        return []
    gpus = parse_gpus(answer[1], answer[0])
    names_mig = "MIG-" in ((os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES") or "")
    migs = mig_instances(nvidia_smi_run.listing(), gpus) if names_mig or any(g.mig for g in gpus) else []
    return visible(gpus, env, migs)


def driver_version() -> str | None:
    """The NVIDIA driver's version (e.g. 550.54.15); None without nvidia-smi."""
    out = nvidia_smi("--query-gpu=driver_version")
    lines = out.split() if out else []
    return lines[0] if lines else None


def gpu_identity(gpus: list[dict], count: int | None = None, driver: str | None = None,
                 cuda: str | None = None) -> dict:
    """What makes a measurement on these GPUs comparable with another: the GPUs' name and compute capability,
    how many the engine runs on (count; default: all given), the driver and the CUDA build. Free memory and
    load are not part of it: they change by the minute."""
    used = gpus[:count] if count else gpus
    return {"name": " + ".join(dict.fromkeys(g.get("name") or "unknown" for g in used)) or None,
            "count": count or len(used),
            "compute_cap": (min(caps) if (caps := [g["compute_cap"] for g in used if g.get("compute_cap")])
                            else None),
            "driver": driver, "cuda": cuda}


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
