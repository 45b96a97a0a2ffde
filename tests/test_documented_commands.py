"""Every command in README.md and docs/*.md that reads the demo's run (`runs/demo`) runs, against a recorded run
of `make demo` (tests/data/demo_run: results.json and the per-item files of `quant sweep recipes/demo.yaml` on a
2-core AVX-512 CPU, with `execution: {quantize_ahead: false}` added since other work kept the machine busy), with
the exit code its `# exit N` comment states (0 where it states none), so the names in the examples exist and the
outcomes are true. Regenerate it after changing the demo: sweep, then copy results.json and variants/*/evals."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys

import pytest

from tests.helpers import REPO

RECORDED = REPO / "tests/data/demo_run"
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```[a-z]*\n(.*?)^```", re.S | re.M)
READS_DEMO = re.compile(r"^(?:\$ )?(?:\.venv/bin/)?quant (gate|diff|choose|report)\b.*\bruns/demo(?=[\s:]|$)")
EXIT = re.compile(r"#\s*exit (\d)\b")


def documented_commands() -> list[tuple[str, str, int]]:
    """(where, command line, expected exit code) for every such command, continuation lines joined."""
    found = []
    for doc in DOCS:
        for block in FENCE.findall(doc.read_text()):
            text = re.sub(r"\\\n\s*", " ", block)
            for line in text.splitlines():
                if READS_DEMO.match(line.strip()):
                    command, _, comment = line.strip().removeprefix("$ ").partition("#")
                    stated = EXIT.search("#" + comment)
                    found.append((doc.name, command.strip(), int(stated.group(1)) if stated else 0))
    return found


COMMANDS = documented_commands()


def test_the_docs_show_the_demo_commands_a_user_needs():
    lines = [c for _, c, _ in COMMANDS]
    assert any(c.startswith("quant gate") and code == 1 for _, c, code in COMMANDS), lines
    assert any(c.startswith("quant gate") and code == 0 for _, c, code in COMMANDS), lines
    assert any(c.startswith("quant diff") for c in lines) and any(c.startswith("quant choose") for c in lines)


@pytest.mark.parametrize("where,command,code", COMMANDS, ids=[f"{w}: {c}" for w, c, _ in COMMANDS])
def test_a_documented_command_gives_its_stated_exit_code(where, command, code, tmp_path):
    shutil.copytree(RECORDED, tmp_path / "runs" / "demo")
    argv = shlex.split(command)
    argv = [a for a in argv[1:] if a != "--screenshot"]   # a picture needs Chromium; the rendering is the same
    proc = subprocess.run([sys.executable, "-m", "quant.cli", *argv], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=_env())
    assert proc.returncode == code, f"{where}: {command}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    assert "Traceback" not in proc.stderr


def _env() -> dict:
    import os
    return {**os.environ, "PYTHONPATH": str(REPO), "QUANT_HISTORY_DB": os.devnull}
