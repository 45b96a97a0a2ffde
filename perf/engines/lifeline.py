"""Run a command that dies with its parent: `python -I -S lifeline.py PARENT_PID GRACE_S [VITAL] -- ARGV...`.

A server started in its own session survives SIGKILL of whoever started it, and so do its own children
(vLLM's engine core and workers) and the shared-memory segments they map. This launcher stays between
the two as a watchdog and takes the whole tree down when the parent process is gone, without anyone's
cleanup code having to run:
- it polls its parent process (not PR_SET_PDEATHSIG on itself, which fires when the parent *thread*
  that started it exits);
- it is a child subreaper, so descendants whose own parent died stay in its tree instead of moving to
  init, and it kills every one of them;
- the command gets PR_SET_PDEATHSIG=SIGKILL tied to this single-threaded launcher and leads a session (and
  so a process group, and where Linux has them an autogroup) of its own, which its descendants inherit: a
  command started at a lowered priority keeps it against the other sessions (a niceness counts only within
  its autogroup; see perf.engines.process.keep_low_priority_across_sessions). If the launcher itself is SIGKILLed (a supervisor such as Ray
  kills the processes it started), the command dies with it but vLLM's engine core and workers, which set
  no death signal, move to init and live on; a rearguard process, forked first and outside that group,
  waits on a pipe from the launcher and, if the launcher ends without saying its tree is gone, SIGKILLs
  the group and every process the launcher had noted (pid and start time: one that left the group), with
  their descendants, and removes their /dev/shm segments. Process groups, not a process's environment:
  vLLM retitles its processes (setproctitle), which overwrites what /proc/<pid>/environ shows; and not a
  cgroup per server, which needs a writable cgroup tree;
- it notes the /dev/shm segments its tree maps and, once the tree is gone, removes those no live
  process maps (a SIGKILLed vLLM leaves its psm_* segments behind);
- a tree is one server: when any of its vital processes dies (the command itself, or a descendant whose
  process title starts with one of the comma-separated VITAL prefixes, e.g. vLLM's VLLM::EngineCore and
  VLLM::Worker), the rest of the tree is of no use and would hold its memory: it gets SIGTERM, a short
  grace, then SIGKILL, and the launcher says in the command's output which process died and how.
SIGTERM/SIGHUP are passed to every process of the tree, which then gets GRACE_S seconds before SIGKILL
(none once the parent is gone); SIGINT is ignored (the command's group is not the terminal's: whoever
started the launcher stops it). The launcher exits as the command did. Stdlib only, started with -I -S:
about 10 MB resident.
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
DEATH_GRACE_S = 2.0   # after a vital process died: time for the rest to log what it saw, then SIGKILL
REARGUARD_TITLE = "quant-rearguard"   # its process title (comm): not the command, not of the tree
ORPHAN_SWEEP_S = 10.0   # how long the rearguard keeps killing the orphans of its tree (some may still be forking)


def lifeline_argv(grace_s: float = 15.0, parent_pid: int | None = None, vital: tuple[str, ...] = ()) -> list[str]:
    """Prefix for a command line: the command then dies with parent_pid (default: this process), and its
    whole tree with any process of it titled with a `vital` prefix."""
    return [os.path.realpath(sys.executable), "-I", "-S", os.path.abspath(__file__),
            str(parent_pid or os.getpid()), f"{grace_s:g}", *([",".join(vital)] if vital else []), "--"]


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


def remove_unmapped(paths: set[str]) -> None:
    """Unlink the shared-memory segments among `paths` that no live process maps."""
    for path in paths - _mapped_by_anyone(paths):
        try:
            os.unlink(path)
        except OSError:
            pass


def process_title(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the process title: [state, ppid, pgrp, session, ...]."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _ended(pid: int) -> str | None:
    """How a process ended ("was killed by signal 9", "exited with status 1", "is gone"); None while it runs.
    A zombie's wait status is the last field of its /proc/<pid>/stat (Linux >= 3.5)."""
    fields = _stat(pid)
    if not fields:
        return "is gone"
    if fields[0] not in "ZX":
        return None
    return _describe_status(int(fields[-1])) if len(fields) >= 50 else "is gone"


def _describe_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"was killed by signal {os.WTERMSIG(status)}"
    return f"exited with status {os.waitstatus_to_exitcode(status)}"


def _signal_all(pids: list[int], sig: int) -> None:
    for p in pids:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass


def _say(text: str) -> None:
    try:
        os.write(2, f"lifeline: {text}\n".encode())
    except OSError:
        pass


def _set_title(title: str) -> str:
    """Set this process's title (comm); the one it had."""
    with open("/proc/self/comm", "r+") as f:
        old = f.read().strip()
        f.seek(0)
        f.write(title)
    return old


def start_time(pid: int) -> str | None:
    """When the process started (clock ticks after boot): with the pid, names one process for good."""
    fields = _stat(pid)
    return fields[19] if fields and len(fields) > 19 else None


def group_members(group: int) -> list[int]:
    """The running (not zombie) processes of a tree's process group, in the session its command leads (a
    group's number is not reused while it has members; the session makes sure it is still this tree's)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields and fields[2:4] == [str(group), str(group)] and fields[0] not in "ZX":
                found.append(int(entry))
    return found


def end_orphans(group: int | None, noted: dict[int, str] | None = None,
                timeout_s: float = ORPHAN_SWEEP_S) -> tuple[set[int], set[str]]:
    """SIGKILL what is left of a tree whose launcher is gone: the processes of its process group `group` (the
    session its command leads), those of `noted` (pid -> start time) still running, and the descendants of all
    of them, until none is left (a dying process may still have forked) or timeout_s has passed; then wait for
    them to end (their shared memory is unmapped with them). Returns the pids ended and the /dev/shm segments
    they mapped."""
    deadline, me, ended, shm = time.monotonic() + timeout_s, os.getpid(), set(), set()
    while time.monotonic() < deadline:
        found = set(group_members(group)) if group else set()
        found |= {p for p, started in (noted or {}).items() if start_time(p) == started and _ended(p) is None}
        for p in list(found):
            found |= set(descendants(p))
        found.discard(me)
        if not found:
            break
        for p in found:
            shm |= shm_mapped(p)
        _signal_all(sorted(found), signal.SIGKILL)
        ended |= found
        time.sleep(0.05)
    while any(_ended(p) is None for p in ended) and time.monotonic() < deadline:
        time.sleep(0.05)
    return ended, shm


def rearguard(notes: int) -> None:
    """Read the launcher's notes until the pipe closes: "group <pgid>" (the command's process group), "pid <pid>
    <start time>" per process of the tree, a /dev/shm path per segment it mapped, and "done" once the tree is
    gone. If the pipe closed without "done", the launcher was killed: end its orphans and remove their segments."""
    shm, noted, group, done, rest = set(), {}, None, False, b""
    while chunk := os.read(notes, 65536):
        *lines, rest = (rest + chunk).split(b"\n")
        for line in lines:
            words = line.decode(errors="replace").split(" ")
            done = done or words == ["done"]
            if words[0] == "group" and len(words) == 2:
                group = int(words[1])
            elif words[0] == "pid" and len(words) == 3:
                noted[int(words[1])] = words[2]
            elif line.startswith(SHM_DIR.encode()):
                shm.add(line.decode(errors="replace"))
    if done:
        return
    ended, mapped = end_orphans(group, noted)
    remove_unmapped(shm | mapped)
    if ended:
        _say(f"the launcher was killed; ended {len(ended)} orphaned process(es) of its tree")


class Watchdog:
    def __init__(self, parent: int, grace_s: float, argv: list[str], vital: tuple[str, ...] = ()):
        self.parent, self.grace_s, self.argv, self.vital_prefixes = parent, grace_s, argv, vital
        self.vital: dict[int, str] = {}   # pid -> title of each vital descendant seen running
        self.me = os.getpid()
        self.status: int | None = None   # the command's wait status
        self.stop_requested = False
        self.shm: set[str] = set()
        self.noted: set[int] = set()   # the tree's processes the rearguard knows of
        self.rearguard, self.notes = self._start_rearguard()

    def _start_rearguard(self) -> tuple[int, int]:
        read_end, write_end = os.pipe()
        title = _set_title(REARGUARD_TITLE)   # the child is born with it (whoever looks for the command skips it)
        pid = os.fork()
        if pid == 0:
            try:
                os.close(write_end)
                for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                    signal.signal(sig, signal.SIG_IGN)
                os.setpgid(0, 0)   # out of the launcher's group: whoever kills that group leaves it its work
                rearguard(read_end)
            finally:
                os._exit(0)
        _set_title(title)
        os.close(read_end)
        return pid, write_end

    def _note(self, line: str) -> None:
        try:
            os.write(self.notes, f"{line}\n".encode())
        except OSError:
            pass

    def _tree(self) -> list[int]:
        return [p for p in descendants(self.me) if p != self.rearguard]

    def _start(self) -> int:
        exec_read, exec_write = os.pipe()   # closed in the child by its exec (close-on-exec) or its exit
        pid = os.fork()
        if pid == 0:
            try:
                os.close(exec_read)
                _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
                if os.getppid() != self.me:   # the launcher died before the line above
                    os._exit(1)
                os.setsid()   # the tree's session and process group (its descendants inherit both)
                for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                    signal.signal(sig, signal.SIG_DFL)
                os.execvp(self.argv[0], self.argv)
            except BaseException as exc:   # noqa: BLE001 - the child must never return into the watchdog
                os.write(2, f"lifeline: cannot run {self.argv[0]}: {exc}\n".encode())
            os._exit(127)
        # Only the child can make itself a session leader (setsid fails in a process group leader, so the
        # launcher cannot set its group for it): the group exists once the child has exec'd.
        os.close(exec_write)
        os.read(exec_read, 1)
        os.close(exec_read)
        self._note(f"group {pid}")
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

    def _note_tree(self) -> None:
        """The tree's /dev/shm segments and its vital processes, as they are now."""
        for p in self._tree():
            if p not in self.noted and (started := start_time(p)):
                self._note(f"pid {p} {started}")
                self.noted.add(p)
            new = {path for path in shm_mapped(p) if path.startswith(SHM_DIR)} - self.shm
            for path in new:
                self._note(path)
            self.shm |= new
            if self.vital_prefixes and p not in self.vital:
                title = process_title(p)
                if title.startswith(self.vital_prefixes):
                    self.vital[p] = title

    def _vital_death(self) -> str | None:
        for pid, title in self.vital.items():
            how = _ended(pid)
            if how:
                return f"{title} (pid {pid}) {how}"
        return None

    def _end_tree(self, child: int, grace_s: float) -> None:
        """SIGTERM every descendant once (none when grace_s is 0), SIGKILL what is left after grace_s."""
        deadline = time.monotonic() + grace_s
        if grace_s > 0:
            _signal_all(self._tree(), signal.SIGTERM)
        while True:
            self._reap(child)
            left = self._tree()
            if not left:
                return
            if time.monotonic() >= deadline or os.getppid() != self.parent:
                _signal_all(left, signal.SIGKILL)
            time.sleep(0.02)

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
        death = None
        while self.status is None and not self.stop_requested:
            orphaned = os.getppid() != self.parent
            if orphaned:
                break
            if polls % SHM_SCAN_EVERY == 0:
                self._note_tree()
            death = self._vital_death()
            if death:
                break
            polls += 1
            time.sleep(POLL_S)
            self._reap(child)
        if self.status is not None and not self.stop_requested and self.vital_prefixes:   # a server ended:
            # because a vital process of it died first (the server may react before the next poll)?
            death = death or self._vital_death() or (
                f"the server {os.path.basename(self.argv[0])} (pid {child}) {_describe_status(self.status)}")
        self._note_tree()
        if death:
            _say(f"{death}; stopping the rest of its process tree")
        # Orphaned: nobody is waiting for a clean shutdown and the memory must be free now. After a death,
        # what is left of the tree cannot serve: it gets a short grace to log what it saw.
        grace = 0.0 if orphaned else min(self.grace_s, DEATH_GRACE_S) if death else self.grace_s
        self._end_tree(child, grace)
        remove_unmapped(self.shm)
        self._note("done")
        os.close(self.notes)
        try:
            os.waitpid(self.rearguard, 0)
        except ChildProcessError:   # already reaped with the tree
            pass
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
    vital = argv[2] if len(argv) > 2 and argv[2] != "--" else None
    rest = argv[3 if vital is None else 4:]
    if len(argv) < 4 or argv[2 if vital is None else 3] != "--" or not rest:
        print("usage: lifeline.py PARENT_PID GRACE_S [VITAL_PREFIX,...] -- ARGV...", file=sys.stderr)
        return 2
    prefixes = tuple(p for p in (vital or "").split(",") if p)
    return Watchdog(int(argv[0]), float(argv[1]), rest, prefixes).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
