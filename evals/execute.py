"""Run untrusted generated code in a confined process, and count a pass only when its tests ran to the end.

What confines the process is in evals/sandbox.py. What makes a pass trustworthy (the threat model):
- The host draws a fresh random token per run (secrets.token_hex) and hands it to evals/sandbox_harness.py
  on stdin. The harness executes the solution and then the tests; only when the tests returned normally does
  it write the token to a pipe the host reads. A pass is: the token came back, exactly, and the process
  exited 0. Exit status alone proves nothing.
- So ending early by any means (sys.exit(0), exit(), os._exit(0), SystemExit in a finally, atexit, a
  finaliser, a thread, a signal, exec of `true`, killing itself) is a failure; printing or writing text to
  any descriptor cannot forge the token; the token is in no file, argument or environment variable, so
  reading the program's own source, /proc/self/cmdline or environ gives nothing.
- Inside the process the harness keeps the token where Python code cannot reach it: the program runs in
  another thread, and an audit hook refuses frame access, tracing, gc scans, ctypes and /proc/self/mem;
  the process is non-dumpable.
- The tests compute what they say: they run in a namespace of their own (the task's prelude, the builtins
  and standard library as they were, and of the program only its entry points, evals/scoring_names.py); the
  modules they use are put back after the program and after each call of an entry point; an entry point's
  result reaches them only as a plain value, so `==` is the interpreter's own.
What a pass does not prove:
- that the tests are strong: a wrong solution passes what its tests let through; and objects inside
  modules (a class's methods) or code the program leaves in objects the tests hold are not put back;
- anything against a program written to attack this harness: CPython's audit hooks are not a security
  boundary (PEP 578), and a program that finds a way past them (an interpreter bug, an unaudited path to
  its own memory) or, unisolated and still root, reads the harness's memory from another process, could
  forge the token. The sandbox bounds what such a program can do to the host; the opted-in fallback bounds
  it only as far as its layers go (evals/fallback.py).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from evals import scoring_names
from evals.fallback import launcher_argv, prepare_work_dir
from evals.sandbox import CgroupLimit, bwrap_argv, capabilities, interpreter, require_isolation

HARNESS = (Path(__file__).resolve().parent / "sandbox_harness.py").read_text()


@dataclass
class ExecResult:
    passed: bool
    reason: str  # "passed", "timeout", "failed: <last line of stderr>", "failed: exited 0 before its tests ..."


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 5.0         # wall clock
    cpu_s: int = 5                 # per process
    memory_bytes: int = 512 << 20  # address space per process; the cgroup caps the whole tree at this
    file_bytes: int = 1 << 20      # largest file written; also the size of the tmpfs work dir and /tmp
    max_procs: int = 32


def _launcher(caps, limits: Limits, cgroup: CgroupLimit, work: str) -> list[str]:
    rlimits = {"RLIMIT_CPU": limits.cpu_s, "RLIMIT_AS": limits.memory_bytes, "RLIMIT_FSIZE": limits.file_bytes,
               "RLIMIT_NOFILE": 64, "RLIMIT_CORE": 0}
    if os.geteuid() != 0:  # counted per user; in bubblewrap's fresh user namespace that is this sandbox alone
        rlimits["RLIMIT_NPROC"] = limits.max_procs
    return launcher_argv(caps.layers, [str(path / "cgroup.procs") for path in cgroup.dirs], rlimits, work,
                         tmp_bytes=limits.file_bytes)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _read_available(fd: int, limit: int) -> bytes:
    os.set_blocking(fd, False)  # a child of the program may still hold the write end open
    try:
        return os.read(fd, limit)
    except BlockingIOError:
        return b""


def _confinement(caps, limits: Limits, work: str, files: list[str]) -> tuple[list[str], str, dict]:
    """(argv prefix, cwd, environment) of the harness: in bubblewrap, or in `work` on the host (opted in)."""
    if caps.isolated:
        binds = [a for name in files for a in ("--ro-bind", os.path.join(work, name), f"/sandbox/{name}")]
        return bwrap_argv(caps.bwrap, limits.file_bytes) + binds, "/", {"HOME": "/sandbox", "TMPDIR": "/tmp"}
    return [], work, {"HOME": work, "TMPDIR": os.path.join(work, "tmp")}


def run_program(source: str, limits: Limits = Limits(), tests: str = "", prelude: str = "",
                entry_points: tuple[str, ...] = (), classes: tuple[str, ...] = ()) -> ExecResult:
    """Run `source` (the solution), then `tests` in a namespace of their own: `prelude` (the task's own text:
    a prompt's helpers and imports) run before the solution, and of the solution only the names the tests
    read that nothing else provides, `entry_points` always (evals/scoring_names.py). Passed only when the tests
    (or, without tests, the source) ran to the end. Raises IsolationRequired where bubblewrap is missing and
    nobody opted in (evals.sandbox.permit_unisolated)."""
    caps = capabilities()
    require_isolation("run_program", caps)
    token = secrets.token_hex(16).encode()
    files = ["program.py", "tests.py", "prelude.py"]
    plan = json.dumps(scoring_names.plan(tests, tuple(entry_points), tuple(classes)))
    with tempfile.TemporaryDirectory(prefix="quant-exec-") as host_dir:
        work = os.path.join(host_dir, "work")
        os.makedirs(os.path.join(work, "tmp"))
        for name, text in zip(files, (source, tests, prelude)):
            with open(os.path.join(work, name), "w") as f:
                f.write(text)
        prepare_work_dir(caps.layers, host_dir, work)
        prefix, cwd, env = _confinement(caps, limits, work, files)
        token_in, token_out = os.pipe()
        os.write(token_out, token)
        os.close(token_out)
        verdict_in, verdict_out = os.pipe()
        cgroup = CgroupLimit(caps, limits.max_procs, limits.memory_bytes)
        # stderr goes to a file (capped by the file-size limit), never into this process's memory.
        try:
            with open(os.path.join(host_dir, "stderr"), "w+b") as err_file:
                argv = (_launcher(caps, limits, cgroup, work) + prefix
                        + [interpreter(), "-I", "-B", "-c", HARNESS, str(verdict_out)] + files + [plan])
                try:
                    proc = subprocess.Popen(argv, cwd=cwd, env={"PATH": "/usr/bin:/bin", **env}, stdin=token_in,
                                            stdout=subprocess.DEVNULL, stderr=err_file, pass_fds=(verdict_out,),
                                            start_new_session=True)
                finally:
                    os.close(verdict_out)
                try:
                    proc.wait(timeout=limits.timeout_s)
                except subprocess.TimeoutExpired:
                    return ExecResult(False, "timeout")
                finally:
                    _kill_group(proc)
                verdict = _read_available(verdict_in, len(token) + 1)
                err_file.seek(max(0, os.fstat(err_file.fileno()).st_size - 4096))
                err = err_file.read()
        finally:
            os.close(token_in)
            os.close(verdict_in)
            cgroup.close()
    if proc.returncode == 0 and secrets.compare_digest(verdict, token):
        return ExecResult(True, "passed")
    if proc.returncode == 0:
        return ExecResult(False, "failed: exited 0 before its tests finished (no token)")
    lines = err.decode(errors="replace").strip().splitlines()
    return ExecResult(False, "failed: " + (lines[-1][:200] if lines else f"exit {proc.returncode}"))
