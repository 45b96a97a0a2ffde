"""Perf stages of variants measured side by side must not share what they measure.

Two servers under load on one host share its CPU (the load generator too), memory bandwidth and PCIe, so a
perf stage takes a lock before its first request: one per node (`node`), one per GPU it was given (`gpu`), or
none (`none`). The lock is a kernel file lock in the node's temporary directory, so it holds across
processes of any executor (two local sweeps, Ray workers) and is released when its holder dies.
"""

from __future__ import annotations

import fcntl
import os
import socket
import tempfile
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Iterator

LOCK_DIR = Path(tempfile.gettempdir())


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as the scheduler handed them out (Ray sets CUDA_VISIBLE_DEVICES)."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    return [gpu for gpu in value.split(",") if gpu.strip()] if value else []


def placement() -> dict:
    return {"node": socket.gethostname(), "gpus": visible_gpus()}


def _hold(path: Path, stack: ExitStack, on_wait) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    stack.callback(os.close, fd)
    try:
        os.fchmod(fd, 0o666)   # another user's sweep on this node waits for the same lock
    except PermissionError:
        pass
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        if on_wait:
            on_wait(path.stem.removeprefix("quant-suite-perf-"))
        fcntl.flock(fd, fcntl.LOCK_EX)
    stack.callback(fcntl.flock, fd, fcntl.LOCK_UN)


def lock_names(mode: str, gpus: list[str]) -> list[str]:
    if mode == "none":
        return []
    if mode == "gpu" and gpus:
        return [f"gpu{gpu}" for gpu in sorted(gpus)]   # sorted: two holders never wait on each other in a circle
    return ["node"]


@contextmanager
def exclusive_perf(mode: str, on_wait=None) -> Iterator[dict]:
    """Hold the perf lock(s) for `mode`; yields where this stage runs and how long it waited for the lock.
    on_wait(lock name) is called when another perf stage holds it."""
    where = placement()
    with ExitStack() as stack:
        names = lock_names(mode, where["gpus"])
        waited = time.time()
        for name in names:
            _hold(LOCK_DIR / f"quant-suite-perf-{name}.lock", stack, on_wait)
        yield {**where, "isolation": mode, "waited_s": round(time.time() - waited, 2)}
