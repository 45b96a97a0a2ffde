"""`quant doctor`'s driver check: the NVIDIA driver this machine has against the CUDA builds of torch in the main
environment (quantizing, in-process scoring) and in the engine's (serving), with the oldest driver each needs
(perf/engines/driver.py)."""

from __future__ import annotations

import subprocess
import sys

from perf.engines.driver import branch, driver_fits, newest_needed, required_driver
from perf.engines.gpus import driver_version

_TORCH_CUDA = r"""
import importlib.util, pathlib, re
spec = importlib.util.find_spec("torch")
try:
    text = pathlib.Path(spec.origin).with_name("version.py").read_text()
except (AttributeError, TypeError, OSError):
    text = ""
found = re.findall(r"^cuda\b[^=\n]*=\s*'([^']+)'", text, re.M)
print(found[0] if found else "none")
"""
FIX = ("install NVIDIA driver {needed} or newer ({branch} branch), or keep the driver and install torch's CUDA 12 "
       "build (docs/gpu.md, \"An older driver\")")


def torch_cuda(python: str | None = None) -> str | None:
    """The CUDA version an interpreter's torch was built for (13.0); None for a CPU build, no torch, no answer."""
    try:
        out = subprocess.run([python or sys.executable, "-c", _TORCH_CUDA], capture_output=True, text=True,
                             timeout=60).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out[-1] if out and out[-1] != "none" else None


def driver_status(engine: dict | str, main_cuda: str | None = None, driver: str | None = None
                  ) -> tuple[bool, str, str | None]:
    """(ok, detail, fix) of `quant doctor`'s driver check: ok where no environment is built for CUDA, or where
    the driver runs every CUDA build there is."""
    builds = {"main torch": main_cuda, "engine torch": engine.get("cuda") if isinstance(engine, dict) else None}
    builds = {where: cuda for where, cuda in builds.items() if cuda}
    if not builds:
        return True, f"{driver or 'none'}; no environment is built for CUDA", None
    described = ", ".join(f"{where} CUDA {cuda} (needs {required_driver(cuda) or 'unknown'})"
                          for where, cuda in builds.items())
    if driver is None:
        needed = newest_needed(list(builds.values())) or "?"
        return (False, f"nvidia-smi does not answer, and {described}",
                FIX.format(needed=needed, branch=branch(needed)) + "; or check that nvidia-smi works")
    too_old = {where: cuda for where, cuda in builds.items() if driver_fits(driver, cuda) is False}
    if too_old:
        needed = newest_needed(list(too_old.values()))
        return (False, f"driver {driver} ({branch(driver)}) is older than {described} allows",
                FIX.format(needed=needed, branch=branch(needed)))
    return True, f"{driver} ({branch(driver)}); {described}", None
