"""What confines generated code, found once per process: bubblewrap namespaces and cgroup limits, where present.

Layers, each used where the machine allows it (`describe()` says which are in force):
- bubblewrap: new user, network, PID, IPC, UTS and mount namespaces; only the system and Python directories,
  read-only; a size-limited tmpfs as the working directory and /tmp; no home, no repository, no host /tmp;
  no network at all (not even loopback to the host); everything in it dies with it.
- cgroup (root only; v2 or v1 `pids` and `memory`): a cap on processes (fork bombs) and on memory, tmpfs
  pages included, for the whole program with its children. rlimits cannot do this for root.
- always: rlimits per process (CPU seconds, address space, file size, open files, processes where not root),
  an environment of PATH, HOME and TMPDIR only, its own session, and the whole process group killed at the end.

Secure by default: without bubblewrap, generated code would run on the host with rlimits only, so it is
refused (`IsolationRequired`) unless the caller opted in with `permit_unisolated(True)` (the CLI's
`--allow-unisolated-code`, a recipe's `allow_unisolated_code: true`). Even then it runs in a private
temporary directory that is also its HOME and holds its TMPDIR, under the layers of evals/fallback.py that
work here (own network namespace; own /tmp, /var/tmp, /dev/shm and /run/lock; as root, home directories
hidden and the user nobody).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from evals.interpreter import NOBODY, interpreter, python_dirs

CGROUP_ROOT = Path("/sys/fs/cgroup")
OPT_IN = ("install bubblewrap (`apt-get install bubblewrap`), or opt in to running it unisolated on this "
          "host with --allow-unisolated-code or the recipe's `allow_unisolated_code: true`")

_unisolated_permitted = False


class IsolationRequired(RuntimeError):
    """Model-generated code would run without isolation and nobody opted in."""


@contextlib.contextmanager
def permit_unisolated(permitted: bool):
    """Within this block, run generated code without bubblewrap where it is missing, if `permitted`."""
    global _unisolated_permitted
    before, _unisolated_permitted = _unisolated_permitted, permitted
    try:
        yield
    finally:
        _unisolated_permitted = before


def unisolated_permitted() -> bool:
    return _unisolated_permitted


def require_isolation(what: str, caps: Capabilities | None = None) -> None:
    """Raise IsolationRequired, naming `what`, unless bubblewrap works here or the user opted in."""
    if not (caps or capabilities()).isolated and not _unisolated_permitted:
        raise IsolationRequired(f"{what}: model-generated code would run without isolation (bubblewrap is "
                                f"missing or does not work here); {OPT_IN}")


@dataclass(frozen=True)
class Capabilities:
    bwrap: str | None          # path of a bubblewrap that works here
    cgroup_v2: Path | None     # a writable cgroup v2 directory to create children in
    cgroup_v1: dict            # controller -> writable v1 hierarchy directory ("pids", "memory")
    layers: tuple = ()         # without bubblewrap: the layers of evals/fallback.py that work here

    @property
    def isolated(self) -> bool:
        return self.bwrap is not None

    @property
    def process_cap(self) -> bool:
        return self.cgroup_v2 is not None or "pids" in self.cgroup_v1 or os.geteuid() != 0


def bwrap_argv(bwrap: str, work_bytes: int) -> list[str]:
    argv = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--uid", str(NOBODY), "--gid", str(NOBODY), "--hostname", "sandbox"]
    for path in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc/alternatives", "/etc/ld.so.cache"):
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.exists(path):
            argv += ["--ro-bind", path, path]
    for path in python_dirs():
        argv += ["--ro-bind", path, path]
    argv += ["--proc", "/proc", "--dev", "/dev",
             "--size", str(work_bytes), "--tmpfs", "/tmp",
             "--size", str(work_bytes), "--tmpfs", "/sandbox", "--remount-ro", "/", "--chdir", "/sandbox"]
    return argv


def _bwrap_works(bwrap: str) -> bool:
    try:
        return subprocess.run(bwrap_argv(bwrap, 1 << 20) + [interpreter(), "-I", "-c", "pass"], env={},
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _writable_cgroups() -> tuple[Path | None, dict]:
    if os.geteuid() != 0:
        return None, {}
    membership = Path("/proc/self/cgroup").read_text()
    unified = CGROUP_ROOT / "cgroup.controllers"
    if unified.exists() and {"pids", "memory"} <= set(unified.read_text().split()):
        own = CGROUP_ROOT / Path(membership.split("::", 1)[-1].strip()).relative_to("/")
        if os.access(own.parent, os.W_OK):
            return own.parent, {}
    v1 = {}
    for line in membership.splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in {"pids", "memory"} & set(controllers.split(",")):
            own = CGROUP_ROOT / controller / path.lstrip("/")  # nested in our own: its limits still apply
            if (own / "cgroup.procs").exists() and os.access(own, os.W_OK):
                v1[controller] = own
    return None, v1


@functools.cache
def capabilities() -> Capabilities:
    bwrap = shutil.which("bwrap")
    v2, v1 = _writable_cgroups()
    if bwrap and _bwrap_works(bwrap):
        return Capabilities(bwrap, v2, v1)
    from evals.fallback import available_layers
    return Capabilities(None, v2, v1, available_layers())


def describe(caps: Capabilities | None = None) -> str:
    caps = caps or capabilities()
    if caps.isolated:
        parts = ["bubblewrap: no network, own pid/ipc/uts/mount namespaces, read-only system, tmpfs work dir"]
    else:
        from evals.fallback import describe_layers
        parts = ["NO bubblewrap isolation (code runs only on opt-in; world-readable files stay readable)",
                 describe_layers(caps.layers),
                 "private temporary work dir as HOME and TMPDIR"]
    if caps.cgroup_v2 or caps.cgroup_v1:
        parts.append("cgroup process and memory caps")
    elif os.geteuid() != 0:
        parts.append("process cap by rlimit")
    else:
        parts.append("NO process cap (root without a writable cgroup)")
    return "; ".join(parts + ["rlimits: cpu, address space, file size, open files; no inherited environment"])


class CgroupLimit:
    """A fresh cgroup with caps on processes and memory; the executor's launcher joins it before exec."""

    def __init__(self, caps: Capabilities, max_procs: int, memory_bytes: int):
        self.dirs: list[Path] = []
        name = f"quant-exec-{uuid.uuid4().hex[:12]}"
        limits = {"pids": [("pids.max", max_procs)],
                  "memory": [("memory.max", memory_bytes), ("memory.swap.max", 0)] if caps.cgroup_v2
                  else [("memory.limit_in_bytes", memory_bytes)]}
        try:
            if caps.cgroup_v2:
                self._make(caps.cgroup_v2 / name, limits["pids"] + limits["memory"])
            for controller, base in caps.cgroup_v1.items():
                self._make(base / name, limits[controller])
        except OSError:
            self.close()
            self.dirs = []

    def _make(self, path: Path, settings) -> None:
        path.mkdir()
        self.dirs.append(path)
        for key, value in settings:
            if (path / key).exists():
                (path / key).write_text(str(value))

    def close(self) -> None:
        """Kill whatever is left in the cgroups, then remove them (exiting processes can keep a cgroup busy
        for a moment, hence the retries)."""
        for path in self.dirs:
            deadline = time.monotonic() + 2.0
            while True:
                try:
                    pids = [int(p) for p in (path / "cgroup.procs").read_text().split()]
                except OSError:
                    pids = []
                for pid in pids:
                    try:
                        os.kill(pid, 9)
                    except ProcessLookupError:
                        pass
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.01)
