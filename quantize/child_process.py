"""The quantize stage's one interface for a sweep: quantize_in_subprocess() runs `python -m quantize` for one
variant in a child process, so a crash, abort or OOM kill there cannot end the sweep. Only this module and
quantize/__main__.py know how the variant travels (as JSON on the command line) and how a failure comes back
(a last `QUANTIZE-ERROR: <reason>` line)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.recipe import Calibration, Variant
from perf.engines.process import run_tied_streaming
from quantize.manifest import MANIFEST_NAME
from quantize.progress import Progress, parse as parse_progress

ERROR_PREFIX = "QUANTIZE-ERROR: "
REPO_ROOT = Path(__file__).resolve().parent.parent
REASON_CHARS = 300   # a reason without the error prefix is the output's last line, cut to this
QUANTIZER_ENV = "QUANT_QUANTIZER"   # set in a quantizer's environment (and so its children's): how it is found


class QuantizeError(RuntimeError):
    """A quantization that failed; the message is the child's one-line reason."""


def command(model_dir: Path, variant: Variant, calibration: Calibration, out_dir: Path,
            python: str | None = None) -> list[str]:
    return [python or sys.executable, "-m", "quantize", "--model", str(model_dir),
            "--variant-json", variant.model_dump_json(), "--calibration-json", calibration.model_dump_json(),
            "--out", str(out_dir)]


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, QUANTIZER_ENV: "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    env.update(extra or {})
    return env


def quantize_in_subprocess(model_dir: Path, variant: Variant, calibration: Calibration, out_dir: Path, *,
                           log_path: Path, on_progress: Callable[[Progress], None] | None = None,
                           timeout: float | None = None, python: str | None = None,
                           env: dict[str, str] | None = None, dense: bool = False) -> dict[str, Any]:
    """`python -m quantize` for one variant, tied to this process (it dies with it, even a SIGKILLed one: it may
    hold a GPU). Its output goes to log_path line by line as it prints it; each progress line it prints is passed
    to on_progress. Returns the manifest; raises QuantizeError with the child's one-line reason on failure."""
    argv = command(model_dir, variant, calibration, out_dir, python)
    if timeout is not None:
        argv += ["--timeout", str(timeout)]
    if dense:
        argv.append("--dense")

    def on_line(line: str) -> None:
        if on_progress is not None and (progress := parse_progress(line)) is not None:
            on_progress(progress)

    proc = run_tied_streaming(argv, log_path, on_line, env=child_env(env))
    if proc.returncode != 0:
        raise QuantizeError(error_reason(proc.stdout) or f"exit code {proc.returncode} (see {log_path})")
    return json.loads((Path(out_dir) / MANIFEST_NAME).read_text())


def error_reason(output: str) -> str | None:
    """The child's reason: its last `QUANTIZE-ERROR:` line, else its last line; None for no output."""
    lines = [line.strip() for line in output.strip().splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith(ERROR_PREFIX.strip()):
            return line.removeprefix(ERROR_PREFIX.strip()).strip()
    return lines[-1][:REASON_CHARS] if lines else None
