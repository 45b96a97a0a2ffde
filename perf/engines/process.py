"""Engine-agnostic process plumbing: free ports, process-group lifecycle, and reading why a server died."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from perf.engines.gpus import nvidia_smi, visible_gpus
from perf.engines.lifeline import ORPHAN_SWEEP_S, REARGUARD_TITLE, end_orphans, lifeline_argv, remove_unmapped


class EngineStartError(RuntimeError):
    """The engine did not come up; `reason` is the engine's own error line when one could be found.
    `timed_out`: it was still starting when its time was up (not the engine's refusal). `blames`: whom the
    engine's output blames, "recipe" or "checkpoint" (perf/engines/start_failure.py), None: neither."""

    def __init__(self, reason: str, log_path: Path | None = None, timed_out: bool = False,
                 blames: str | None = None):
        super().__init__(reason if log_path is None else f"{reason} (log: {log_path})")
        self.reason = reason
        self.log_path = log_path
        self.timed_out = timed_out
        self.blames = blames


class EngineDiedError(RuntimeError):
    """A server that was ready died while it served (any process of its tree: the lifeline then ended the rest);
    the message says which process, how, and the last lines of the server's log."""


# After a request failed: how long a dying server's tree may take to be ended by its lifeline (it notices a
# death within a poll and gives the rest 2 s); a server that still answers /health is taken to be alive at once.
DEATH_WAIT_S = 10.0


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Tree:
    """What a lifeline started: `group` is the command's pid, and the session and process group its descendants
    stay in; `rearguard` the process that ends them if the lifeline itself is killed (perf/engines/lifeline.py)."""
    group: int
    rearguard: psutil.Process


class Tied(subprocess.Popen):
    """A lifeline started by spawn(); `tree` once its command and rearguard run (None if it exited first)."""
    tree: Tree | None = None


def spawn(argv: list[str], env: dict[str, str], log_path: Path, grace_s: float = 15.0,
          vital: tuple[str, ...] = ()) -> Tied:
    """Start argv in a new session behind a lifeline (perf/engines/lifeline.py: the whole tree dies with this
    process, even SIGKILLed, and with any of its processes titled with a `vital` prefix), stdout+stderr appended
    to log_path. The Popen is the lifeline's; its only child besides its rearguard is argv."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = Tied(lifeline_argv(grace_s, vital=vital) + argv, stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        proc.tree = _tree_of(proc)
    except BaseException:   # Ctrl-C while the lifeline starts: nobody else holds it to stop it
        stop_group(proc, grace_s=0)
        raise
    return proc


def _tree_of(lifeline: subprocess.Popen, timeout_s: float = 10.0) -> Tree | None:
    """The lifeline forks its rearguard and then the command within milliseconds of starting."""
    deadline = time.monotonic() + timeout_s
    while lifeline.poll() is None and time.monotonic() < deadline:
        try:
            kids = psutil.Process(lifeline.pid).children()
            guards = [k for k in kids if k.name() == REARGUARD_TITLE]
            commands = [k for k in kids if k not in guards]
        except (psutil.Error, ProcessLookupError):   # a child ended meanwhile: look again
            continue
        if guards and commands:
            return Tree(commands[0].pid, guards[0])
        time.sleep(0.005)
    return None


def run_tied_streaming(argv: list[str], log_path: Path, on_line=None, grace_s: float = 10.0,
                       env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """subprocess.run(argv) behind a lifeline: the command's whole tree dies with this process even if it is
    SIGKILLed, and an exception here (Ctrl-C, SIGTERM) stops the tree (SIGTERM, grace_s, SIGKILL) before it
    goes on. stdout and stderr together are written to log_path line by line as the command prints them
    (log_path is replaced: a killed run's partial log goes) and each line is passed to on_line(line).
    The CompletedProcess holds the whole output as stdout."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"}   # lines as they happen
    lines = []
    with open(log_path, "w") as log, subprocess.Popen(
            lifeline_argv(grace_s) + argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, errors="replace", env=env) as proc:
        try:
            for line in proc.stdout:
                log.write(line)
                log.flush()
                lines.append(line)
                if on_line:
                    on_line(line)
            proc.wait()
        except BaseException:
            proc.terminate()
            proc.wait()
            raise
    return subprocess.CompletedProcess(argv, proc.returncode, "".join(lines), "")


def command_pid(lifeline: subprocess.Popen) -> int | None:
    """The pid of the command a lifeline runs (None until it has forked, or once it is gone)."""
    try:
        kids = [p for p in psutil.Process(lifeline.pid).children() if p.name() != REARGUARD_TITLE]
    except psutil.NoSuchProcess:
        return None
    return kids[0].pid if kids else None


def process_tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def renice_process(proc: psutil.Process, nice: int) -> None:
    """Set the niceness of every thread of proc (Linux keeps one per thread; new threads inherit it)."""
    for thread in proc.threads():
        try:
            os.setpriority(os.PRIO_PROCESS, thread.id, nice)
        except ProcessLookupError:   # the thread ended meanwhile
            pass


AUTOGROUP = Path("/proc/self/autogroup")


def keep_low_priority_across_sessions() -> bool:
    """Where the kernel shares the CPU between sessions first (Linux's autogroup), a niceness only orders a
    process within its own session: a build at nice 19 in the sweep's session still takes half the CPU from a
    server in a session of its own. A process started at a lowered priority calls this to lead a session, and
    so an autogroup, of its own at that niceness (a command a lifeline started leads one already: its
    autogroup's niceness is set). Returns whether it did: not at normal priority, without autogroup, or where
    it cannot lead a session (a process group leader that is not one cannot)."""
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    if nice <= 0 or not AUTOGROUP.exists():
        return False
    try:
        if os.getsid(0) != os.getpid():
            os.setsid()
        AUTOGROUP.write_text(str(nice))
    except OSError:
        return False
    return True


def tree_rss_bytes(pid: int) -> int:
    total = 0
    for p in process_tree(pid):
        try:
            total += p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


def parse_gpu_apps(csv_text: str) -> dict[int, int]:
    """`nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits` -> {pid: bytes}."""
    used: dict[int, int] = {}
    for line in csv_text.strip().splitlines():
        pid, _, mib = (part.strip() for part in line.partition(","))
        if pid.isdigit() and mib.isdigit():
            used[int(pid)] = used.get(int(pid), 0) + int(mib) * (1 << 20)
    return used


def gpu_used_bytes() -> int | None:
    """Device memory in use (by anyone) on the GPUs this process may use (CUDA_VISIBLE_DEVICES; a MIG instance
    as its GPU; all GPUs where it is unset); None without nvidia-smi."""
    out = nvidia_smi("--query-gpu=uuid,memory.used")
    if not out:
        return None
    mine = {g.parent or g.uuid for g in visible_gpus()} if os.environ.get("CUDA_VISIBLE_DEVICES") else None
    mib = [int(used) for uuid, _, used in (line.strip().partition(", ") for line in out.splitlines())
           if used.strip().isdigit() and (mine is None or uuid in mine)]
    return sum(mib) * (1 << 20) if mib else None


def tree_gpu_bytes(pid: int, used_before: int | None = None) -> int | None:
    """Device memory held by the process tree on NVIDIA GPUs; None without nvidia-smi.

    Where nvidia-smi lists no process of ours (a container with its own PID namespace lists none or
    foreign PIDs), falls back to the growth of the GPUs' used memory since `used_before`, read before the
    tree started: right as long as nothing else allocates on those GPUs meanwhile."""
    out = nvidia_smi("--query-compute-apps=pid,used_memory")
    if out is None:
        return None
    used = parse_gpu_apps(out)
    mine = [used[p.pid] for p in process_tree(pid) if p.pid in used]
    if mine:
        return sum(mine)
    now = gpu_used_bytes() if used_before is not None else None
    return max(0, now - used_before) if now is not None else None


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_group(proc: subprocess.Popen, grace_s: float = 15.0) -> None:
    """Stop a spawn()ed lifeline and its tree: SIGTERM to the lifeline, which passes it once to every process
    of the tree; after grace_s SIGKILL to every descendant (a child that called setsid() is out of the group
    but still in the tree), which the lifeline reaps before it removes their shared memory and exits. The
    lifeline's group gets SIGKILL last, in case the lifeline itself does not exit. Where the lifeline was
    killed before it could end its tree, what is left of it (its process group) is ended here and its shared
    memory removed, and its rearguard, which does the same, is waited for: on return nothing of it runs."""
    if proc.poll() is None or process_tree(proc.pid)[1:]:
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            for p in process_tree(proc.pid)[1:]:
                try:
                    p.kill()
                except psutil.NoSuchProcess:
                    pass
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        _killpg(proc.pid, signal.SIGKILL)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    tree = proc.tree if isinstance(proc, Tied) else None
    if tree is not None:
        _, shm = end_orphans(tree.group)
        remove_unmapped(shm)
        _wait_gone(tree.rearguard, ORPHAN_SWEEP_S + 5)


def _wait_gone(proc: psutil.Process, timeout_s: float) -> None:
    """Until proc has exited (a zombie has: its parent, init once orphaned, reaps it) or timeout_s."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.05)


# "ValueError: msg", "torch.OutOfMemoryError: msg", possibly after a log prefix such as
# "(EngineCore pid=12) ERROR 11-30 12:00:00 [core.py:1] ".
_EXC_LINE = re.compile(r"((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt)): (\S.*)$")
# Wrappers that only point at the real cause printed earlier (by the engine-core process).
_WRAPPERS = ("Engine core initialization failed", "See root cause above", "Engine process failed to start",
             "core proc(s)")


def error_reason(log_text: str) -> str | None:
    """The most specific error line in an engine log, or None.

    Preference: the last exception line that is not a generic wrapper; else the last exception line;
    else the last line mentioning "error". An exception line ending in ":" (vLLM's "... Reasons:") gets
    its indented continuation lines appended."""
    lines = [ln.rstrip() for ln in log_text.splitlines() if ln.strip()]
    exc = []
    for i, ln in enumerate(lines):
        m = _EXC_LINE.search(ln)
        if m:
            exc.append(f"{m.group(1)}: {m.group(2)}" + _continuation(lines, i, ln[:m.start()]))
    specific = [e for e in exc if not any(w in e for w in _WRAPPERS)]
    if specific:
        return specific[-1]
    if exc:
        return exc[-1]
    generic = [ln.strip() for ln in lines if re.search(r"error", ln, re.IGNORECASE)]
    return generic[-1] if generic else None


_VALIDATION = re.compile(r"validation errors? for \w+$")   # pydantic's: the message is on the next line


def _continuation(lines: list[str], i: int, prefix: str, limit: int = 6) -> str:
    if _VALIDATION.search(lines[i]) and i + 1 < len(lines) and lines[i + 1][:1].isspace():
        return ": " + re.sub(r"\s*\[type=.*$", "", lines[i + 1]).strip()
    if not lines[i].endswith(":"):
        return ""
    more = []
    for ln in lines[i + 1:i + 1 + limit]:
        rest = ln[len(prefix):] if ln.startswith(prefix) else ""
        if not rest[:1].isspace():
            break
        more.append(rest.strip())
    return " " + "; ".join(more) if more else ""


# vLLM's log lines: "WARNING 11-30 12:00:00 [file.py:12] message", maybe after "(EngineCore pid=12) ".
_ENGINE_LINE = re.compile(r"\b(WARNING|ERROR|CRITICAL) \d\d-\d\d [\d:.]+ \[[^\]]*\] (.*)$")


def engine_warnings(log_text: str, limit: int = 10) -> list[str]:
    """The engine's distinct WARNING/ERROR messages in log_text, "LEVEL message", the first `limit`."""
    found: dict[str, None] = {}
    for line in log_text.splitlines():
        m = _ENGINE_LINE.search(line)
        if m and len(found) < limit:
            found.setdefault(f"{m[1]} {m[2].strip()}", None)
    return list(found)


def log_since(log_path: Path, offset: int) -> str:
    """What was appended to log_path after its first `offset` bytes ("" when there is no log)."""
    try:
        with open(log_path, "rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


def last_lines(text: str, count: int = 6, width: int = 200) -> list[str]:
    """The last `count` non-blank lines of text, each cut to `width` characters."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return [ln if len(ln) <= width else ln[:width] + "…" for ln in lines[-count:]]
