import shutil
import sys
from pathlib import Path

import pytest

from tests.helpers import DEMO_MODEL, REPO


@pytest.fixture
def standin_engine(tmp_path: Path, monkeypatch) -> Path:
    """An engine python that starts tests/standin_engine.py where the sweep starts vLLM. Returns the file each
    start appends its served name to (a start is what a cached stage avoids)."""
    python = tmp_path / "standin-python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{REPO / "tests" / "standin_engine.py"}" "$@"\n')
    python.chmod(0o755)
    starts = tmp_path / "engine-starts.txt"
    monkeypatch.setenv("QUANT_ENGINE_PYTHON", str(python))
    monkeypatch.setenv("STANDIN_ENGINE_STARTS", str(starts))
    return starts


@pytest.fixture
def demo_checkpoints(tmp_path: Path):
    """make(name): a copy of the demo model as a distinct ready-made checkpoint (its own content hash)."""
    def make(name: str) -> Path:
        path = tmp_path / "checkpoints" / name
        shutil.copytree(DEMO_MODEL, path)
        (path / "README.md").write_text(f"{name}\n")
        return path
    return make
