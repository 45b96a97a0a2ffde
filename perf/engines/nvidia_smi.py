"""The one place nvidia-smi is asked: with a short overall deadline (QUANT_NVIDIA_SMI_TIMEOUT seconds, 5 by
default), its output decoded leniently (a driver may print bytes that are not UTF-8), and a hang or a driver that
does not answer remembered, so that a host whose nvidia-smi hangs costs one deadline, not one per question.

Remembered per nvidia-smi program (its path and modification time): a different nvidia-smi on PATH is asked
afresh. "No devices were found" is an answer (no GPU), not a failure; so is a query the driver refuses (a field
it does not know, missing permissions): the next question is asked."""

from __future__ import annotations

import os
import shutil
import subprocess

DEFAULT_TIMEOUT_S = 5.0
NO_DEVICES = "No devices were found"
DRIVER_FAILED = "NVIDIA-SMI has failed"   # "... because it couldn't communicate with the NVIDIA driver"
_INVALID_FIELD = "is not a valid field to query"
_failed: dict[tuple[str, int], str] = {}   # nvidia-smi program -> why it is not asked again


def timeout_s() -> float:
    try:
        return max(0.1, float(os.environ.get("QUANT_NVIDIA_SMI_TIMEOUT", DEFAULT_TIMEOUT_S)))
    except ValueError:
        return DEFAULT_TIMEOUT_S


def _program() -> tuple[str, int] | None:
    path = shutil.which("nvidia-smi")
    if path is None:
        return None
    try:
        return path, os.stat(path).st_mtime_ns
    except OSError:
        return None


def problem() -> str | None:
    """Why the nvidia-smi on PATH is not asked any more (it hung, or the driver did not answer); None where it
    answers or was never asked."""
    program = _program()
    return _failed.get(program) if program else None


def run(*args: str) -> tuple[int, str, str] | None:
    """(exit status, stdout, stderr) of `nvidia-smi ARGS`; None without nvidia-smi, or where it hung or the driver
    did not answer, now or before (problem() says why)."""
    program = _program()
    if program is None or program in _failed:
        return None
    deadline = timeout_s()
    try:
        out = subprocess.run([program[0], *args], capture_output=True, timeout=deadline, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        _failed[program] = f"nvidia-smi did not answer within {deadline:g} s"
        return None
    except OSError as exc:
        _failed[program] = f"nvidia-smi could not run: {exc.strerror or exc}"
        return None
    stdout, stderr = (out.stdout.decode("utf-8", "replace"), out.stderr.decode("utf-8", "replace"))
    said = (stdout + "\n" + stderr).strip()
    if out.returncode != 0 and (DRIVER_FAILED in said or not said):
        _failed[program] = " ".join(said.split())[:300] or f"nvidia-smi exited with status {out.returncode}"
        return None
    return out.returncode, stdout, stderr


def csv(*query: str) -> str | None:
    """nvidia-smi's CSV answer to a query (no header, no units); "" where it found no devices; None without
    nvidia-smi, or where it fails."""
    answer = run(*query, "--format=csv,noheader,nounits")
    if answer is None:
        return None
    status, stdout, stderr = answer
    if NO_DEVICES in stdout + stderr:
        return ""
    return stdout if status == 0 else None


def query(kind: str, fields: list[str]) -> tuple[list[str], str] | None:
    """(the fields answered, their CSV) of `--query-gpu=` or `--query-compute-apps=` (kind): a field this
    nvidia-smi does not know (driver 470 has no compute_cap) is left out and the rest asked again; None without
    nvidia-smi, or where it fails."""
    fields = list(fields)
    while fields:
        answer = run(f"--query-{kind}={','.join(fields)}", "--format=csv,noheader,nounits")
        if answer is None:
            return None
        status, stdout, stderr = answer
        said = stdout + stderr
        if NO_DEVICES in said:
            return fields, ""
        if status == 0:
            return fields, stdout
        unknown = [f for f in fields if f'"{f}" {_INVALID_FIELD}' in said]
        if not unknown:
            return None
        fields = [f for f in fields if f not in unknown]
    return None


def listing() -> str:
    """`nvidia-smi -L`: one line per GPU and per MIG instance; "" where it fails or found none."""
    answer = run("-L")
    return answer[1] if answer and answer[0] == 0 else ""
