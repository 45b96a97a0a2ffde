"""Run untrusted generated code in a confined process; what confines it is in evals/sandbox.py."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from dataclasses import dataclass

from evals.sandbox import CgroupLimit, bwrap_argv, capabilities, interpreter


@dataclass
class ExecResult:
    passed: bool
    reason: str  # "passed", "timeout", "failed: <last line of stderr>"


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 5.0         # wall clock
    cpu_s: int = 5                 # per process
    memory_bytes: int = 512 << 20  # address space per process; the cgroup caps the whole tree at this
    file_bytes: int = 1 << 20      # largest file written; also the size of the tmpfs work dir and /tmp
    max_procs: int = 32


# Limits are applied between fork and exec by a small launcher that then execs the sandbox, not by a
# preexec_fn: programs run from many threads at once, and preexec_fn is not safe in a threaded process.
_LAUNCHER = """
import ctypes, os, resource, sys
ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG=SIGKILL, kept across exec: dies with a SIGKILLed sweep
cgroup_procs, cpu_s, memory, file_bytes, max_procs, root = sys.argv[1:7]
for path in filter(None, cgroup_procs.split(os.pathsep)):
    try:
        with open(path, "w") as f:
            f.write(str(os.getpid()))
    except OSError:
        pass  # the rlimits still apply
for limit, value in ((resource.RLIMIT_CPU, cpu_s), (resource.RLIMIT_AS, memory), (resource.RLIMIT_FSIZE, file_bytes),
                     (resource.RLIMIT_NOFILE, 64), (resource.RLIMIT_CORE, 0)):
    resource.setrlimit(limit, (int(value), int(value)))
if root == "0":  # counted per user; in bubblewrap's fresh user namespace that is this sandbox alone
    resource.setrlimit(resource.RLIMIT_NPROC, (int(max_procs), int(max_procs)))
os.execv(sys.argv[7], sys.argv[7:])
"""


def _launcher(limits: Limits, cgroup: CgroupLimit) -> list[str]:
    procs = os.pathsep.join(str(path / "cgroup.procs") for path in cgroup.dirs)
    return [interpreter(), "-I", "-S", "-c", _LAUNCHER, procs, str(limits.cpu_s), str(limits.memory_bytes),
            str(limits.file_bytes), str(limits.max_procs), "1" if os.geteuid() == 0 else "0"]


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_program(source: str, limits: Limits = Limits()) -> ExecResult:
    caps = capabilities()
    with tempfile.TemporaryDirectory(prefix="quant-exec-") as host_dir:
        program = os.path.join(host_dir, "program.py")
        with open(program, "w") as f:
            f.write(source)
        if caps.isolated:
            argv = bwrap_argv(caps.bwrap, limits.file_bytes) + [
                "--ro-bind", program, "/sandbox/program.py", interpreter(), "-I", "-B", "program.py"]
            cwd = "/"
        else:
            argv, cwd = [interpreter(), "-I", "-B", program], host_dir
        cgroup = CgroupLimit(caps, limits.max_procs, limits.memory_bytes)
        # stderr goes to a file (capped by the file-size limit), never into this process's memory.
        try:
            with open(os.path.join(host_dir, "stderr"), "w+b") as err_file:
                proc = subprocess.Popen(_launcher(limits, cgroup) + argv, cwd=cwd, env={"PATH": "/usr/bin:/bin"},
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err_file,
                                        start_new_session=True)
                try:
                    proc.wait(timeout=limits.timeout_s)
                except subprocess.TimeoutExpired:
                    return ExecResult(False, "timeout")
                finally:
                    _kill_group(proc)
                err_file.seek(max(0, os.fstat(err_file.fileno()).st_size - 4096))
                err = err_file.read()
        finally:
            cgroup.close()
    if proc.returncode == 0:
        return ExecResult(True, "passed")
    lines = err.decode(errors="replace").strip().splitlines()
    return ExecResult(False, "failed: " + (lines[-1][:200] if lines else f"exit {proc.returncode}"))
