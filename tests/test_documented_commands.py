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


DOCTOR = re.compile(r"^(?:\$ )?(?:\.venv/bin/)?quant doctor\b")


def documented_doctor_commands() -> list[tuple[str, str, int]]:
    """Every `quant doctor` line of the docs and the Makefile, with its stated exit code (0 where none)."""
    found = []
    texts = [(doc.name, block) for doc in DOCS for block in FENCE.findall(doc.read_text())]
    texts.append(("Makefile", (REPO / "Makefile").read_text()))
    for where, text in texts:
        for line in re.sub(r"\\\n\s*", " ", text).splitlines():
            line = line.strip()
            if DOCTOR.match(line):
                command, _, comment = line.removeprefix("$ ").partition("#")
                stated = EXIT.search("#" + comment)
                found.append((where, command.strip(), int(stated.group(1)) if stated else 0))
    return found


DOCTOR_COMMANDS = documented_doctor_commands()


def test_make_demo_and_the_docs_run_quant_doctor_first():
    assert ("Makefile", ".venv/bin/quant doctor recipes/demo.yaml", 0) in DOCTOR_COMMANDS
    makefile = (REPO / "Makefile").read_text()
    demo = makefile[makefile.index("\ndemo: "):]
    assert demo.index("quant doctor") < demo.index("quant sweep")
    assert any(where == "gpu.md" for where, _, _ in DOCTOR_COMMANDS)


@pytest.mark.parametrize("where,command,code", DOCTOR_COMMANDS, ids=[f"{w}: {c}" for w, c, _ in DOCTOR_COMMANDS])
def test_a_documented_doctor_command_gives_its_stated_exit_code(where, command, code):
    """Offline, as the tests run: a recipe whose model is on the hub cannot be ready here (its model is not in
    the cache), so its doctor says so on the hub line (exit 2); every other command gives its stated code."""
    from core.recipe import load_recipe
    from core.hub import is_hub_id
    argv = shlex.split(command)[1:]
    recipe = next((a for a in argv[1:] if a.endswith(".yaml")), None)
    model = load_recipe(REPO / recipe).model if recipe else ""
    from quantize.gguf_chunks import CHUNKED_MODELS
    # the real-model demos': installed (or assembled) by `make setup-real` only
    in_package = model.startswith("package:") or any(model.endswith(s.file_name) for s in CHUNKED_MODELS.values())
    on_hub = is_hub_id(model) and not in_package
    proc = subprocess.run([sys.executable, "-m", "quant.cli", *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={**_env(), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out and all(line.startswith(("ok ", "MISSING ", "doctor: ")) for line in
                                          proc.stdout.splitlines()), out
    if on_hub:
        assert proc.returncode == 2 and "MISSING  hub: " in out and "HF_HUB_OFFLINE" in out, out
    elif in_package and proc.returncode == 2:
        assert "MISSING  model: " in out and "fix: make setup-real" in out, out
    else:
        assert proc.returncode == code, f"{where}: {command}\n{out[-3000:]}"
