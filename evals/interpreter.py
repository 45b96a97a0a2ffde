"""The interpreter model-generated code runs with, the directories it needs, and the user it runs as where
it is dropped to one (evals/sandbox.py with bubblewrap, evals/fallback.py without)."""

from __future__ import annotations

import os
import sys

NOBODY = 65534


def interpreter() -> str:
    return os.path.realpath(sys.executable)


def python_dirs() -> list[str]:
    """Directories the sandboxed interpreter needs: its prefix (stdlib, libpython)."""
    return sorted({sys.base_prefix, os.path.dirname(os.path.dirname(interpreter()))})
