"""Run untrusted generated code in a separate, resource-limited process.

Enforced here: its own session (process group, all killed at the end), wall-clock timeout, CPU seconds,
address space, file size, open files, a fresh temporary working directory, an empty environment and
isolated Python (-I). Network isolation and a process-count limit that binds root need a namespace
sandbox; that is the evals hardening issue's job.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass


@dataclass
class ExecResult:
    passed: bool
    reason: str  # "passed", "timeout", "failed: <last line of stderr>"


def _limits(cpu_s: int, memory_bytes: int, file_bytes: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


def run_program(source: str, timeout_s: float = 5.0, cpu_s: int = 5, memory_bytes: int = 512 << 20,
                file_bytes: int = 1 << 20) -> ExecResult:
    with tempfile.TemporaryDirectory(prefix="quant-exec-") as workdir:
        path = os.path.join(workdir, "program.py")
        with open(path, "w") as f:
            f.write(source)
        proc = subprocess.Popen(
            [sys.executable, "-I", "-B", path], cwd=workdir, env={"PATH": "/usr/bin:/bin"},
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            start_new_session=True, preexec_fn=_limits(cpu_s, memory_bytes, file_bytes))
        try:
            _, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return ExecResult(False, "timeout")
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    if proc.returncode == 0:
        return ExecResult(True, "passed")
    lines = err.decode(errors="replace").strip().splitlines()
    return ExecResult(False, "failed: " + (lines[-1][:200] if lines else f"exit {proc.returncode}"))
