"""Foreign load: how much CPU other processes took while a perf level was measured.

The host's busy CPU time comes from /proc/stat (every CPU, every process); ours is the sum of utime+stime+
cutime+cstime in /proc/<pid>/stat over this process and its descendants (the load generator, the server behind
its lifeline, the engine's processes), so a child that ends during the level still counts through its parent's
cutime/cstime. What is left is other processes' work. On a CPU engine, a level during which it averaged
FOREIGN_CORES_LIMIT cores or more is flagged `foreign_load`: its numbers may be those of a shared machine, not of
the variant.

On a GPU engine (rule `gpu`) the model runs on the GPU, and the host's CPU matters only for the API server and
the load generator: a level is flagged where another process held memory on one of the variant's GPUs
(nvidia-smi, read before and after the level) or where other processes took FOREIGN_CORES_LIMIT cores or more
AND left less than LOADGEN_CORES idle, enough to slow the load generator. Other processes' GPU utilization is
not read (nvidia-smi gives it per GPU, not per process): memory held on the variant's GPUs is the sign.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from perf.engines.gpus import gpu_processes

FOREIGN_CORES_LIMIT = 0.5   # other processes' CPU, in cores averaged over the level, from which it is flagged
UNSEEN_SLACK_BYTES = 512 << 20   # unseen processes' memory beyond our server's: below this, a reading's noise
LOADGEN_CORES = 1.0   # on a GPU engine: idle cores below which foreign CPU can slow the load generator
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
# /proc/stat's cpu line: user nice system idle iowait irq softirq steal guest guest_nice; guest time is
# already inside user and nice, idle and iowait are not work.
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


@dataclass(frozen=True)
class CpuReading:
    at: float          # time.monotonic()
    host_busy_s: float
    own_s: float
    cpus: int


def host_busy_s(stat_text: str) -> tuple[float, int]:
    """(busy CPU seconds of every CPU since boot, number of CPUs) from /proc/stat's text."""
    busy, cpus = 0.0, 0
    for line in stat_text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            values = [int(v) for v in fields[1:]]
            busy = sum(values[i] for i in _BUSY_FIELDS if i < len(values)) * _TICK_S
        elif fields and fields[0].startswith("cpu"):
            cpus += 1
    return busy, max(cpus, 1)


def process_cpu_s(pid: int) -> float:
    """utime+stime of pid and of its children it has waited for (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return 0.0
    fields = text[text.rindex(")") + 2:].split()   # after "pid (comm) ": the comm may hold spaces
    return sum(int(v) for v in fields[11:15]) * _TICK_S   # fields 14-17 of proc(5)


def tree_pids(root: int) -> list[int]:
    """root and its descendants, from /proc/<pid>/task/<tid>/children."""
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        found.append(pid)
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    todo += [int(c) for c in f.read().split()]
            except OSError:
                pass
    return found


def read_cpu(root: int | None = None) -> CpuReading:
    with open("/proc/stat") as f:
        busy, cpus = host_busy_s(f.read())
    own = sum(process_cpu_s(pid) for pid in tree_pids(root or os.getpid()))
    return CpuReading(time.monotonic(), busy, own, cpus)


def host_load(before: CpuReading, after: CpuReading, limit_cores: float = FOREIGN_CORES_LIMIT,
              gpu_foreign: list[dict] | None = None) -> dict:
    """What others took between two readings, and whether that flags the level (results.json `host_load`).
    gpu_foreign: on a GPU engine, the other processes seen on the variant's GPUs (gpu_foreign_processes);
    None on a CPU engine."""
    wall = max(after.at - before.at, 1e-9)
    host = max(after.host_busy_s - before.host_busy_s, 0.0)
    own = max(after.own_s - before.own_s, 0.0)
    foreign = max(host - own, 0.0)
    load1, load5, _ = os.getloadavg()
    result = {"wall_s": round(wall, 3), "cpus": after.cpus, "host_busy_cpu_s": round(host, 3),
              "own_cpu_s": round(own, 3), "foreign_cpu_s": round(foreign, 3),
              "foreign_cores": round(foreign / wall, 3), "loadavg_1m": round(load1, 2), "loadavg_5m": round(load5, 2),
              "limit_cores": limit_cores, "foreign_load": foreign / wall >= limit_cores}
    if gpu_foreign is not None:
        idle = max(after.cpus - host / wall, 0.0)
        result.update(rule="gpu", idle_cores=round(idle, 3), loadgen_cores=LOADGEN_CORES,
                      gpu_foreign_processes=gpu_foreign,
                      foreign_load=bool(gpu_foreign) or (foreign / wall >= limit_cores and idle < LOADGEN_CORES))
    return result


def gpu_foreign_processes(gpu_uuids: list[str], root: int | None = None, own_bytes: int | None = None) -> list[dict]:
    """Processes other than this one and its descendants that hold memory on any of gpu_uuids (all GPUs where
    empty), as nvidia-smi lists them. nvidia-smi in a container lists the host's PIDs, which this process cannot
    see: where one of our own processes is among those listed, every unseen one is someone else's; where none is
    (our own are unseen too), the unseen ones are counted by memory: what they hold beyond `own_bytes` (our
    server's device memory, perf/engines/process.py tree_gpu_bytes) is another tenant's, one entry with pid None."""
    listed = [p for p in gpu_processes() or [] if not gpu_uuids or p.gpu_uuid in gpu_uuids]
    ours = set(tree_pids(root or os.getpid()))
    seen = [p for p in listed if os.path.exists(f"/proc/{p.pid}")]
    unseen = [p for p in listed if p not in seen]
    foreign = [{"pid": p.pid, "gpu_uuid": p.gpu_uuid, "used_bytes": p.used_bytes} for p in seen if p.pid not in ours]
    if any(p.pid in ours for p in seen):
        return foreign + [{"pid": p.pid, "gpu_uuid": p.gpu_uuid, "used_bytes": p.used_bytes, "unseen": True}
                          for p in unseen]
    excess = sum(p.used_bytes for p in unseen) - (own_bytes or 0)
    if unseen and own_bytes is not None and excess > UNSEEN_SLACK_BYTES:
        foreign.append({"pid": None, "gpu_uuid": ",".join(dict.fromkeys(p.gpu_uuid for p in unseen)),
                        "used_bytes": excess, "unseen": True})
    return foreign
