"""Run a command that dies with its parent: `python -I -S lifeline.py PARENT_PID GRACE_S -- ARGV...`.

A server started in its own session survives SIGKILL of whoever started it, and so do its own children
(vLLM's engine core and workers) and the shared-memory segments they map. This launcher stays between
the two as a watchdog and takes the whole tree down when the parent process is gone, without anyone's
cleanup code having to run:
- it polls its parent process (not PR_SET_PDEATHSIG on itself, which fires when the parent *thread*
  that started it exits);
- it is a child subreaper, so descendants whose own parent died stay in its tree instead of moving to
  init, and it kills every one of them;
- the command itself gets PR_SET_PDEATHSIG=SIGKILL tied to this launcher, which is single-threaded, in
  case the launcher itself is SIGKILLed;
- it notes the /dev/shm segments its tree maps and, once the tree is gone, removes those no live
  process maps (a SIGKILLed vLLM leaves its psm_* segments behind).
SIGTERM/SIGHUP are passed to every process of the tree, which then gets GRACE_S seconds before SIGKILL
(none once the parent is gone); SIGINT is ignored (Ctrl-C reaches the tree through the terminal's process
group). The launcher exits as the command did. Stdlib only, started with -I -S: about 10 MB resident.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
POLL_S = 0.1
SHM_SCAN_EVERY = 10   # polls between two notes of the tree's /dev/shm mappings
SHM_DIR = "/dev/shm/"


def lifeline_argv(grace_s: float = 15.0, parent_pid: int | None = None) -> list[str]:
    """Prefix for a command line: the command then dies with parent_pid (default: this process)."""
    return [os.path.realpath(sys.executable), "-I", "-S", os.path.abspath(__file__),
            str(parent_pid or os.getpid()), f"{grace_s:g}", "--"]


# --- the watchdog (runs in the launcher process) ---------------------------------------------------------

def _prctl(option: int, value: int) -> None:
    if ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def children(pid: int) -> list[int]:
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def descendants(pid: int) -> list[int]:
    found, todo = [], children(pid)
    while todo:
        p = todo.pop()
        if p not in found:
            found.append(p)
            todo += children(p)
    return found


def shm_mapped(pid: int) -> set[str]:
    try:
        with open(f"/proc/{pid}/maps") as f:
            return {line.split(None, 5)[5].strip() for line in f
                    if SHM_DIR in line and not line.rstrip().endswith("(deleted)")}
    except (OSError, IndexError):
        return set()


def _mapped_by_anyone(paths: set[str]) -> set[str]:
    in_use: set[str] = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and paths - in_use:
            in_use |= shm_mapped(int(entry)) & paths
    return in_use


def _signal_all(pids: list[int], sig: int) -> None:
    for p in pids:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass


class Watchdog:
    def __init__(self, parent: int, grace_s: float, argv: list[str]):
        self.parent, self.grace_s, self.argv = parent, grace_s, argv
        self.me = os.getpid()
        self.status: int | None = None   # the command's wait status
        self.stop_requested = False
        self.shm: set[str] = set()

    def _start(self) -> int:
        pid = os.fork()
        if pid == 0:
            try:
                _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
                if os.getppid() != self.me:   # the launcher died before the line above
                    os._exit(1)
                for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                    signal.signal(sig, signal.SIG_DFL)
                os.execvp(self.argv[0], self.argv)
            except BaseException as exc:   # noqa: BLE001 - the child must never return into the watchdog
                os.write(2, f"lifeline: cannot run {self.argv[0]}: {exc}\n".encode())
            os._exit(127)
        return pid

    def _reap(self, child: int) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == child:
                self.status = status

    def _note_shm(self) -> None:
        for p in descendants(self.me):
            self.shm |= {path for path in shm_mapped(p) if path.startswith(SHM_DIR)}

    def _end_tree(self, child: int, grace_s: float) -> None:
        """SIGTERM every descendant once (none when grace_s is 0), SIGKILL what is left after grace_s."""
        deadline = time.monotonic() + grace_s
        if grace_s > 0:
            _signal_all(descendants(self.me), signal.SIGTERM)
        while True:
            self._reap(child)
            left = descendants(self.me)
            if not left:
                return
            if time.monotonic() >= deadline or os.getppid() != self.parent:
                _signal_all(left, signal.SIGKILL)
            time.sleep(0.02)

    def _remove_stale_shm(self) -> None:
        for path in self.shm - _mapped_by_anyone(self.shm):
            try:
                os.unlink(path)
            except OSError:
                pass

    def run(self) -> int:
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._on_stop)
        if os.getppid() != self.parent:   # the parent died while this launcher started
            return 1
        child = self._start()
        polls = 0
        orphaned = False
        while self.status is None and not self.stop_requested:
            orphaned = os.getppid() != self.parent
            if orphaned:
                break
            if polls % SHM_SCAN_EVERY == 0:
                self._note_shm()
            polls += 1
            time.sleep(POLL_S)
            self._reap(child)
        self._note_shm()
        # Orphaned: nobody is waiting for a clean shutdown and the memory must be free now.
        self._end_tree(child, 0.0 if orphaned else self.grace_s)
        self._remove_stale_shm()
        return self._exit_code()

    def _on_stop(self, *_: object) -> None:
        self.stop_requested = True

    def _exit_code(self) -> int:
        if self.status is None:
            return 1
        if os.WIFSIGNALED(self.status):
            sig = os.WTERMSIG(self.status)
            if sig != signal.SIGKILL:
                signal.signal(sig, signal.SIG_DFL)
            os.kill(self.me, sig)   # die the same way, so our own parent sees what the command did
            return 128 + sig
        return os.waitstatus_to_exitcode(self.status)


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: lifeline.py PARENT_PID GRACE_S -- ARGV...", file=sys.stderr)
        return 2
    return Watchdog(int(argv[0]), float(argv[1]), argv[3:]).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
