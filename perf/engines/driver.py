"""Which NVIDIA driver a CUDA build of torch (and of vLLM beside it) needs. A CUDA x.y runtime runs on any driver
of its major version's first release and newer (NVIDIA's minor version compatibility); an older driver fails
at the first CUDA call ("The NVIDIA driver on your system is too old"). torch's wheels bundle their runtime, so
the driver is the one thing the machine must bring. Linux driver versions, from NVIDIA's CUDA compatibility
table."""

from __future__ import annotations

import re

MIN_DRIVER = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}


def _numbers(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def required_driver(cuda: str) -> str | None:
    """The oldest driver a CUDA `cuda` build runs on (13.0 -> 580.65.06); None for a version not in the table."""
    major = _numbers(cuda)[:1]
    return MIN_DRIVER.get(major[0]) if major else None


def driver_fits(driver: str, cuda: str) -> bool | None:
    """Whether `driver` runs a CUDA `cuda` build; None where either is unknown."""
    needed = required_driver(cuda)
    if needed is None or not _numbers(driver):
        return None
    return _numbers(driver) >= _numbers(needed)


def branch(driver: str) -> str:
    """550.54.15 -> R550."""
    return f"R{_numbers(driver)[0]}" if _numbers(driver) else driver


def newest_needed(cudas: list[str]) -> str | None:
    """The newest of the drivers these CUDA builds need (the one that runs them all)."""
    return max(filter(None, map(required_driver, cudas)), key=_numbers, default=None)
