"""Defence in depth where bubblewrap is missing and the user opted in: the kernel's own facilities, each one
used where this machine allows it (a probe finds out once per process), applied by evals/sandbox_launcher.py.

- network: a new network namespace (as a normal user inside a user namespace where it stays itself): only
  `lo`, down; no connection to the host or anywhere else.
- tmp: a private mount namespace (as a normal user inside that user namespace) in which /tmp, /var/tmp,
  /dev/shm and /run/lock (those present) are empty size-limited tmpfs of the program's own (but for its work
  dir, bound back at its own path): nothing it writes there reaches the host's, nothing of the host's is
  there to read.
- hidden (root): a private mount namespace in which /root, /home and any directory others may not enter
  that lies above the interpreter are empty read-only tmpfs, but for the interpreter's own directories.
- nobody (root): the program runs as the user nobody, with no supplementary groups and no_new_privs: files
  and directories it does not own and that are not world-writable cannot be changed, 0700 directories not
  entered, other users' processes not signalled or read (/proc/*/environ, /proc/*/mem). Its work dir is
  chowned to nobody.
What none of these stop: reading world-readable files outside the hidden directories (a repository under
/work or /srv, /etc), writing other world-writable places than those (a world-writable directory elsewhere),
filling the disk through its work dir (rlimit caps one file, not the total), and signalling other processes
of the same user (as a normal user, the user's own processes; as root, dropped to nobody, other programs
running as nobody).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from pathlib import Path

from evals.interpreter import NOBODY, interpreter, python_dirs

LAUNCHER = (Path(__file__).resolve().parent / "sandbox_launcher.py").read_text()
HIDDEN_HOMES = ("/root", "/home")
SHARED_TMP = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")   # the world-writable directories of a Linux host
DESCRIPTIONS = {"network": "own network namespace (no network, loopback down)",
                "hidden": "home directories hidden (/root, /home: own mount namespace)",
                "tmp": "own empty /tmp, /var/tmp, /dev/shm and /run/lock (size-limited tmpfs, own mount namespace)",
                "nobody": "runs as user nobody (no_new_privs; work dir its own)"}


def _others_may_enter(path: str) -> bool:
    return bool(os.stat(path).st_mode & 0o001)


def hide_plan(work_dir: str | None = None) -> dict[str, list[str]]:
    """hidden directory -> the directories kept beneath it: the interpreter's, and the run's work dir."""
    pythons = python_dirs()
    hidden = {h for h in HIDDEN_HOMES if os.path.isdir(h) and not os.path.islink(h)}
    for path in pythons:  # nobody must reach the interpreter: hide the highest directory it may not enter
        parts = Path(path).parts
        for depth in range(2, len(parts)):
            ancestor = str(Path(*parts[:depth]))
            if not _others_may_enter(ancestor):
                hidden.add(ancestor)
                break
    keep = sorted(set(pythons) | ({work_dir} if work_dir else set()))
    keep = [k for k in keep if not any(k.startswith(o + "/") for o in keep)]
    hidden = {h for h in hidden if not any(k == h or h.startswith(k + "/") for k in keep)}
    hidden = {h for h in hidden if not any(h.startswith(o + "/") for o in hidden)}
    return {h: [k for k in keep if k.startswith(h + "/")] for h in sorted(hidden)}


def tmp_plan(work_dir: str | None = None) -> dict[str, list[str]]:
    """private directory -> the directories kept beneath it (the run's work dir, the interpreter's)."""
    keep = [path for path in python_dirs() + ([work_dir] if work_dir else [])]
    return {shared: sorted(k for k in keep if k.startswith(shared + "/"))
            for shared in SHARED_TMP if os.path.isdir(shared) and not os.path.islink(shared)}


def launcher_argv(layers: tuple[str, ...], cgroup_procs: list[str], rlimits: dict[str, int],
                  work_dir: str | None = None, tmp_bytes: int = 1 << 20) -> list[str]:
    config = {"parent": os.getpid(), "cgroup_procs": cgroup_procs, "rlimits": rlimits, "layers": list(layers),
              "hide": hide_plan(work_dir) if "hidden" in layers else {},
              "tmp": tmp_plan(work_dir) if "tmp" in layers else {}, "tmp_bytes": tmp_bytes}
    return [interpreter(), "-I", "-S", "-c", LAUNCHER, json.dumps(config)]


def prepare_work_dir(layers: tuple[str, ...], host_dir: str, work: str) -> None:
    """As nobody, the program must still reach and write its work dir (and nothing else of `host_dir`)."""
    if "nobody" in layers:
        os.chmod(host_dir, 0o711)
        for path in (work, os.path.join(work, "tmp")):
            os.chown(path, NOBODY, NOBODY)


def _works(layers: tuple[str, ...]) -> bool:
    try:
        return subprocess.run(launcher_argv(layers, [], {}) + [interpreter(), "-I", "-c", "import json"], env={},
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@functools.cache
def available_layers() -> tuple[str, ...]:
    """The layers that work here, each tried on top of those before it."""
    layers: tuple[str, ...] = ()
    for layer in ("network", "hidden", "tmp", "nobody") if os.geteuid() == 0 else ("network", "tmp"):
        if _works(layers + (layer,)):
            layers += (layer,)
    return layers


def describe_layers(layers: tuple[str, ...]) -> str:
    """The layers in force, and what stays open without each missing one."""
    parts = [DESCRIPTIONS[layer] for layer in layers]
    if "network" not in layers:
        parts.append("NO network namespace: the network is reachable")
    if "tmp" not in layers:
        parts.append("NO private /tmp: the host's /tmp, /var/tmp, /dev/shm and /run/lock are shared")
    if os.geteuid() != 0:
        parts.append("runs as this user: the user's files are reachable")
    elif "nobody" not in layers:
        parts.append("runs as ROOT: every file is reachable")
    return "; ".join(parts)
