"""Run one quantization in a child process: a crash, abort or OOM kill there cannot end the sweep."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from core.recipe import Calibration, Variant

ERROR_PREFIX = "QUANTIZE-ERROR: "
REPO_ROOT = Path(__file__).resolve().parent.parent


class QuantizeError(RuntimeError):
    """A quantization that failed; the message is the child's one-line reason."""


def command(model_dir: Path, variant: Variant, calibration: Calibration, out_dir: Path,
            python: str | None = None) -> list[str]:
    return [python or sys.executable, "-m", "quantize", "--model", str(model_dir),
            "--variant-json", variant.model_dump_json(), "--calibration-json", calibration.model_dump_json(),
            "--out", str(out_dir)]


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("HF_DATASETS_OFFLINE", "1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    env.update(extra or {})
    return env


def quantize_in_subprocess(model_dir: Path, variant: Variant, calibration: Calibration, out_dir: Path, *,
                           log_path: Path | None = None, timeout: float | None = None,
                           python: str | None = None, env: dict[str, str] | None = None,
                           dense: bool = False) -> dict[str, Any]:
    """`python -m quantize` for one variant; its output goes to log_path (if given).
    Returns the manifest; raises QuantizeError with the child's reason on failure."""
    cmd = command(model_dir, variant, calibration, out_dir, python)
    if timeout is not None:
        cmd += ["--timeout", str(timeout)]
    if dense:
        cmd.append("--dense")
    log = open(log_path, "w") if log_path else None
    try:
        proc = subprocess.run(cmd, stdout=log or subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              env=child_env(env))
    finally:
        if log:
            log.close()
    if log_path:
        with open(log_path, "a") as fh:
            fh.write(proc.stderr)
    if proc.returncode != 0:
        raise QuantizeError(error_reason(proc.stderr, proc.returncode))
    return json.loads((Path(out_dir) / "quant_manifest.json").read_text())


def error_reason(stderr: str, returncode: int) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.startswith(ERROR_PREFIX)]
    return lines[-1][len(ERROR_PREFIX):] if lines else f"exit status {returncode} without a reason"
