"""Perf stages of variants measured side by side must not share what they measure.

Two servers under load on one host share its CPU (the load generator too), memory bandwidth and PCIe, so a
perf stage takes a lock before its first request: one per node (`node`), one per GPU it was given (`gpu`), or
none (`none`). The lock is a kernel file lock, so it holds across processes of any executor (two local sweeps,
Ray workers) and is released when its holder dies. Its file lives in a directory only this user writes
(<tmp>/quant-suite-<uid>, created 0700 and checked to be a real directory of this user's, not group- or
world-writable; where another user took that name first, the first of <tmp>/quant-suite-<uid>.1 … .7 that
is), or in $QUANT_PERF_LOCK_DIR where users who share a machine choose to share one; the file is opened
without following links and never chmod'ed. The holder writes who it is into it, so a wait names it.
"""

from __future__ import annotations

import fcntl
import os
import socket
import stat
import tempfile
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Iterator

LOCK_DIR_VAR = "QUANT_PERF_LOCK_DIR"


class PerfLockError(RuntimeError):
    """The lock's directory or file is not one this suite can trust: one line saying why."""


PRIVATE_CANDIDATES = 8   # <tmp>/quant-suite-<uid>, then .1 … .7: another user's planted directory is passed over


def lock_dir() -> Path:
    """The directory of the perf lock files, created and checked as the module docstring says. Where another
    user made <tmp>/quant-suite-<uid> first, the next of its numbered siblings that is this user's own is used
    (every process of this user walks the same list, so they still meet on one lock)."""
    configured = os.environ.get(LOCK_DIR_VAR)
    if configured:
        path = Path(configured)
        problem = _not_a_directory(path)
        if problem:
            raise PerfLockError(problem)
        return path
    base = Path(tempfile.gettempdir()) / f"quant-suite-{os.getuid()}"
    problems = []
    for n in range(PRIVATE_CANDIDATES):
        path = base if n == 0 else base.with_name(f"{base.name}.{n}")
        problem = _not_private(path)
        if problem is None:
            return path
        problems.append(problem)
    raise PerfLockError(f"{problems[0]}, and none of its {PRIVATE_CANDIDATES - 1} numbered siblings is this user's "
                        f"own: remove them, or set ${LOCK_DIR_VAR} to a directory of your own")


def _not_a_directory(path: Path) -> str | None:
    try:
        info = os.lstat(path)
    except OSError as exc:
        return f"perf lock directory {path}: {exc.strerror}"
    if not stat.S_ISDIR(info.st_mode):
        return f"perf lock directory {path}: not a directory (a link or a file is there)"
    return None


def _not_private(path: Path) -> str | None:
    """Why `path` (created 0700 if absent) is not a directory only this user writes, else None."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        return f"perf lock directory {path}: {exc.strerror}"
    problem = _not_a_directory(path)
    if problem:
        return problem
    info = os.lstat(path)
    if info.st_uid != os.getuid() or info.st_mode & 0o022:
        return f"perf lock directory {path}: owned by uid {info.st_uid} or writable by others"
    return None


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as the scheduler handed them out (Ray sets CUDA_VISIBLE_DEVICES)."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    return [gpu for gpu in value.split(",") if gpu.strip()] if value else []


def placement() -> dict:
    return {"node": socket.gethostname(), "gpus": visible_gpus()}


def _hold(path: Path, stack: ExitStack, on_wait) -> None:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        raise PerfLockError(f"perf lock {path}: {exc.strerror} (a link planted there is never followed)") from None
    stack.callback(os.close, fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        raise PerfLockError(f"perf lock {path}: not a regular file")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        if on_wait:
            on_wait(path.stem.removeprefix("quant-suite-perf-"), _holder(fd))
        fcntl.flock(fd, fcntl.LOCK_EX)
    stack.callback(fcntl.flock, fd, fcntl.LOCK_UN)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%H:%M:%S')}".encode(), 0)


def _holder(fd: int) -> str:
    """Who holds the lock, as the holder wrote it (printable characters only)."""
    text = os.pread(fd, 200, 0).decode("utf-8", "replace")
    return "".join(c for c in text if c.isprintable()) or "a process that did not say"


def lock_names(mode: str, gpus: list[str]) -> list[str]:
    if mode == "none":
        return []
    if mode == "gpu" and gpus:
        return [f"gpu{gpu}" for gpu in sorted(gpus)]   # sorted: two holders never wait on each other in a circle
    return ["node"]


@contextmanager
def exclusive_perf(mode: str, on_wait=None) -> Iterator[dict]:
    """Hold the perf lock(s) for `mode`; yields where this stage runs and how long it waited for the lock.
    on_wait(lock name, its holder) is called when another perf stage holds it."""
    where = placement()
    with ExitStack() as stack:
        names = lock_names(mode, where["gpus"])
        waited = time.time()
        for name in names:
            _hold(lock_dir() / f"quant-suite-perf-{name}.lock", stack, on_wait)
        yield {**where, "isolation": mode, "waited_s": round(time.time() - waited, 2)}
