"""The set-up's installer (scripts/installer.sh): uv gets the machine's pip configuration (where the CPU torch
wheel and local indexes are), and a uv step that fails is done again by pip. Fakes stand in for uv and for a
virtual environment's python: they record what they were asked to do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO

sys.path.insert(0, str(REPO / "scripts"))
import uv_flags  # noqa: E402


def test_pip_configuration_becomes_uv_flags_with_pips_precedence(tmp_path):
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nfind-links = /opt/wheels /opt/more\nextra-index-url = file:///opt/pypi/simple\n"
                    "constraint = /etc/caps.txt\ncert = /etc/ca.pem\nindex-url = https://global.invalid/simple\n"
                    "[install]\nindex-url = https://install.invalid/simple\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}   # this machine's own settings
    env.update(PIP_CONFIG_FILE=str(conf), PIP_FIND_LINKS="/from/env")
    out = subprocess.run([sys.executable, str(REPO / "scripts/uv_flags.py")], capture_output=True, text=True,
                         env=env, check=True).stdout.split()
    pairs = dict(zip(out[:-1:2], out[1::2]))
    assert pairs["--find-links"] == "/from/env"                           # a variable wins over the file
    assert pairs["--index-url"] == "https://install.invalid/simple"       # [install] wins over [global]
    assert pairs["--extra-index-url"] == "file:///opt/pypi/simple" and pairs["--constraint"] == "/etc/caps.txt"
    assert "--cert=/etc/ca.pem" in out and "--no-index" not in out
    assert uv_flags.uv_flags({"no-index": "true", "find-links": "/a /b"}) == \
        ["--find-links", "/a", "--find-links", "/b", "--no-index"]


def _fakes(tmp_path: Path, uv_exit: int) -> tuple[dict, Path]:
    calls = tmp_path / "calls"
    bin_dir, venv = tmp_path / "bin", tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    bin_dir.mkdir()
    for path, name, code in ((bin_dir / "uv", "uv", uv_exit), (venv / "bin/python", "venv-python", 0)):
        path.write_text(f'#!/bin/sh\n[ "$1" = "--version" ] && echo "uv 0.0.0" && exit 0\n'
                        f'echo "{name} $*" >> {calls}\nexit {code}\n')
        path.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHON": sys.executable}
    return env, calls


def _install(tmp_path: Path, uv_exit: int, installer: str) -> tuple[int, list[str]]:
    env, calls = _fakes(tmp_path, uv_exit)
    script = f"set -euo pipefail; source scripts/installer.sh; pip_install {tmp_path / 'venv'} -q 'torch==2.13.0'"
    proc = subprocess.run(["bash", "-c", script], cwd=REPO, env={**env, "QUANT_INSTALLER": installer},
                          capture_output=True, text=True)
    return proc.returncode, calls.read_text().splitlines() if calls.exists() else []


def test_uv_installs_with_the_machines_pip_configuration(tmp_path):
    code, calls = _install(tmp_path, uv_exit=0, installer="auto")
    assert code == 0 and len(calls) == 1 and calls[0].startswith(f"uv pip install --python {tmp_path}/venv/bin/python")
    assert "--index-strategy unsafe-best-match" in calls[0] and calls[0].endswith("-q torch==2.13.0")


def test_a_failed_uv_step_is_done_again_by_pip(tmp_path):
    code, calls = _install(tmp_path, uv_exit=1, installer="auto")
    assert code == 0 and calls[0].startswith("uv pip install") and calls[1] == "venv-python -m pip install -q torch==2.13.0"


def test_pip_only_and_uv_only(tmp_path):
    code, calls = _install(tmp_path / "pip", uv_exit=0, installer="pip")
    assert code == 0 and calls == ["venv-python -m pip install -q torch==2.13.0"]
    code, calls = _install(tmp_path / "uv", uv_exit=1, installer="uv")
    assert code != 0 and len(calls) == 1 and calls[0].startswith("uv pip install")
