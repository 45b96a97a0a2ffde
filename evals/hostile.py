"""A corpus of hostile programs, and a check that the sandbox contains each one (`quant sandbox-check`).

Every program ends by asserting that its attack worked, so a contained attack is scored as a failure. None
sends traffic anywhere but to a loopback listener of the check's own.
Containment is judged from the host: the victim files are intact, nothing new appeared beside them or in the
host's world-writable directories, the loopback listener saw no connection, no sandboxed process is left,
and a sentinel process still lives.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from evals.execute import ExecResult, run_program
from evals.sandbox import capabilities

SECRET_NAME = "QUANT_SANDBOX_CHECK_SECRET"
VICTIM_TEXT = "keep me"
SHARED_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")   # world-writable on a Linux host


def shared_paths(victim_dir: str, suffix: str) -> list[str]:
    """A file of this check's in each world-writable directory of the host: `-probe` (the host's, which a
    program sharing that directory can see) and `-pwned` (what such a program leaves)."""
    name = os.path.basename(victim_dir)
    return [os.path.join(d, f"{name}-{suffix}") for d in SHARED_DIRS if os.path.isdir(d)]


def corpus(victim_dir: str, victim_file: str, port: int) -> dict[str, str]:
    probes = shared_paths(victim_dir, "probe")
    return {
        "fork_bomb": "import os\nwhile True:\n    os.fork()\n",
        "memory_bomb": "blocks = []\nwhile True:\n    blocks.append(bytearray(64 << 20))\n",
        "infinite_loop": "while True:\n    pass\n",
        "write_outside": f"open({victim_dir!r} + '/pwned', 'w').write('x')\n",
        # Writes only where it sees the host's probe: into a world-writable directory it shares with the host.
        "write_shared_tmp": ("import os\nshared = []\n"
                             f"for probe in {probes!r}:\n"
                             "    if os.path.exists(probe):\n"
                             "        open(probe[:-len('probe')] + 'pwned', 'w').write('x')\n"
                             "        shared.append(os.path.dirname(probe))\n"
                             "assert shared, 'no world-writable directory shared with the host'\n"),
        "delete_outside": f"import os\nos.remove({victim_file!r})\n",
        "read_host_files": f"print(open({victim_file!r}).read())\n",
        "fill_disk": "i = 0\nwhile True:\n    open(f'f{i}', 'wb').write(b'x' * (1 << 19))\n    i += 1\n",
        "socket_to_host": f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\n",
        # Sends nothing: a network interface other than loopback is what any outside traffic would need.
        "network_interfaces": ("import socket\nnames = [name for _, name in socket.if_nameindex()]\n"
                               "assert [n for n in names if n != 'lo'], f'interfaces: {names}'\n"),
        "read_secrets": (
            "import glob, os\n"
            f"found = [k for k in os.environ if k == {SECRET_NAME!r}]\n"
            "for path in glob.glob('/proc/*/environ'):\n"
            "    try:\n"
            f"        found += [v for v in open(path, 'rb').read().split(b'\\0') if {SECRET_NAME!r}.encode() in v]\n"
            "    except OSError:\n"
            "        pass\n"
            "assert found, 'no secret in reach'\n"),
        "spawn_shell": ("import subprocess\n"
                        f"subprocess.run(['sh', '-c', 'echo pwned > {victim_dir}/shell'], check=True)\n"),
        "kill_everything": "import os, signal\nos.kill(-1, signal.SIGKILL)\nassert False, 'still here'\n",
    }


@dataclass
class Outcome:
    name: str
    result: ExecResult
    seconds: float
    harm: list[str]          # what reached the host; empty = contained

    @property
    def contained(self) -> bool:
        return not self.result.passed and not self.harm


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def _ours(pid: int) -> bool:
    """Started by this process, or an orphan (a program that escaped its tree is re-parented to init):
    sandboxed runs of other processes on this machine are not this check's business."""
    parent, seen = _parent(pid), set()
    if parent == 1:
        return True
    while parent and parent not in seen:
        if parent == os.getpid():
            return True
        seen.add(parent)
        parent = _parent(parent)
    return False


def _sandboxed_processes() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"program.py" in cmdline and b"-I" in cmdline and _ours(int(entry.name)):
                found.append(int(entry.name))
    return found


def _unsafe_here(name: str) -> str | None:
    """Programs that would harm this machine without the layer that contains them are not run."""
    caps = capabilities()
    if name == "kill_everything" and not caps.isolated:
        return "not run: without a PID namespace it would signal every process of this user"
    if name == "fork_bomb" and not caps.process_cap:
        return "not run: no process cap binds here (root without a writable cgroup)"
    if name == "fill_disk" and not caps.isolated:
        return "not run: without a size-limited work dir it would fill this machine's disk until the time limit"
    return None


def _harm(victim: Path, listener: socket.socket, sentinel: subprocess.Popen) -> list[str]:
    """What of the host a program reached, seen from the host."""
    harm = []
    if not victim.exists() or victim.read_text() != VICTIM_TEXT:
        harm.append("victim file changed or deleted")
    if left := [os.path.dirname(p) for p in shared_paths(str(victim.parent), "pwned") if os.path.exists(p)]:
        harm.append(f"wrote into the host's {', '.join(left)}")
    if extra := sorted(p.name for p in victim.parent.iterdir() if p != victim):
        harm.append(f"files written beside the victim: {extra}")
    try:
        listener.accept()[0].close()
        harm.append("connected to a host loopback port")
    except BlockingIOError:
        pass
    if left := _sandboxed_processes():
        harm.append(f"processes left running: {left[:5]}")
    if sentinel.poll() is not None:
        harm.append("killed a process outside the sandbox")
    return harm


def _reset(victim: Path) -> None:
    """The victim as it was, and nothing beside it (what one program left is not blamed on the next)."""
    for path in victim.parent.iterdir():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path != victim:
            path.unlink()
    victim.write_text(VICTIM_TEXT)
    _remove_shared(str(victim.parent))
    for probe in shared_paths(str(victim.parent), "probe"):
        Path(probe).write_text(VICTIM_TEXT)


def _remove_shared(victim_dir: str) -> None:
    for path in shared_paths(victim_dir, "probe") + shared_paths(victim_dir, "pwned"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def check() -> list[Outcome]:
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="quant-victim-") as victim_dir, socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        victim = Path(victim_dir) / "precious.txt"
        sentinel = subprocess.Popen(["sleep", "600"])
        os.environ[SECRET_NAME] = "hunter2"
        try:
            for name, source in corpus(victim_dir, str(victim), listener.getsockname()[1]).items():
                if reason := _unsafe_here(name):
                    outcomes.append(Outcome(name, ExecResult(False, reason), 0.0, [reason]))
                    continue
                _reset(victim)
                start = time.perf_counter()
                result = run_program(source)
                outcomes.append(Outcome(name, result, time.perf_counter() - start, _harm(victim, listener, sentinel)))
        finally:
            _remove_shared(victim_dir)
            os.environ.pop(SECRET_NAME, None)
            sentinel.kill()
            sentinel.wait()
    return outcomes
