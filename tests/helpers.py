"""What many tests share that is not a fixture: the repository's paths and `quant` run as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEMO_MODEL = REPO / "demo/model"
TEST_RECIPES = REPO / "tests/data/recipes"   # recipes of the sweep tests (validated with the shipped ones)


def quant(*args: str, timeout: float | None = None, env: dict | None = None) -> tuple[int, str]:
    """`python -m quant.cli ARGS` in the repository: (exit code, stdout + stderr)."""
    proc = subprocess.run([sys.executable, "-m", "quant.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout, env=env)
    return proc.returncode, proc.stdout + proc.stderr


def not_about_foreign_load(warnings: list[str]) -> list[str]:
    """A workload's warnings but the foreign-load ones, which depend on what else runs on the test machine."""
    return [w for w in warnings if "measured under foreign load" not in w]
