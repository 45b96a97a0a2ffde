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


def _setup(tmp_path: Path, gpu: bool, torch_in_main_venv: str = "",
           fail_serve: bool = False, gpu_unseen: bool = False, driver: str = "",
           extra_env: dict | None = None, nvidia_smi: str = "") -> tuple[int, str, list[str]]:
    """scripts/setup.sh with fakes for uv, nvidia-smi (a GPU when `gpu`), bwrap and the two venvs' python (the
    main one reports `torch_in_main_venv` as its installed torch; the serving one fails to import vllm when
    `fail_serve`; the main one's torch does not see the GPU when `gpu_unseen`); nvidia_smi: the fake's own body."""
    calls, bin_dir, site = tmp_path / "calls", tmp_path / "bin", tmp_path / "site"
    bin_dir.mkdir(parents=True, exist_ok=True)
    if torch_in_main_venv:
        (site / f"torch-{torch_in_main_venv}.dist-info").mkdir(parents=True)
        (site / f"torch-{torch_in_main_venv}.dist-info/METADATA").write_text(
            f"Metadata-Version: 2.1\nName: torch\nVersion: {torch_in_main_venv}\n")
    fakes = {bin_dir / "uv": 'echo "uv $*" >> CALLS', bin_dir / "bwrap": "true",
             # set-up asks this python for its torch: the real interpreter answers, seeing only a stand-in dist-info
             tmp_path / "main/bin/python": f'if [ "$1" = "-" ]; then PYTHONPATH={site} exec {sys.executable} -S "$@"; fi\n'
                                            'echo "main-python $*" >> CALLS'
                                            + ('\ncase "$*" in *torch.cuda*) exit 1;; esac' if gpu_unseen else ''),
             tmp_path / "serve/bin/python": 'echo "serve-python $*" >> CALLS' + ("\nexit 1" if fail_serve else "")}
    if gpu or nvidia_smi:
        fakes[bin_dir / "nvidia-smi"] = nvidia_smi or (f'echo "{driver}"' if driver else "true")
    for path, body in fakes.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text('#!/bin/sh\n[ "$1" = "--version" ] && echo "uv 0.0.0" && exit 0\n'
                        + body.replace("CALLS", str(calls)) + "\n")
        path.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHON": sys.executable, "QUANT_SKIP_GPTQMODEL": "1",
           "QUANT_MAIN_VENV": str(tmp_path / "main"), "QUANT_SERVE_VENV": str(tmp_path / "serve"), **(extra_env or {})}
    proc = subprocess.run(["bash", "scripts/setup.sh"], cwd=REPO, env=env, capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr, calls.read_text().splitlines() if calls.exists() else []


def test_setup_on_a_gpu_installs_vllm_for_cuda_and_keeps_what_it_needs(tmp_path):
    code, output, calls = _setup(tmp_path / "gpu", gpu=True)
    assert code == 0, output
    assert any("-c requirements/serve-cuda.lock -r requirements/serve-cuda.txt" in call for call in calls)
    assert not any("uninstall" in call for call in calls)          # torchvision & co: vllm on CUDA needs them
    torch_installs = [call for call in calls if call.endswith("-q torch===2.13.0")]   # `===`: the CUDA build
    assert len(torch_installs) == 2 and not any(call.endswith("torch==2.13.0") for call in calls), calls
    asked = ("main-python -c import torch", "serve-python -c import sys, torch")   # after install: do both see it?
    checks = [call for call in calls if call.startswith(asked)]
    assert [c.split()[0] for c in checks] == ["main-python", "serve-python"], calls
    assert "torch.cuda.is_available()" in "\n".join(calls) and "current_platform.is_cuda()" in "\n".join(calls)
    code, output, calls = _setup(tmp_path / "cpu", gpu=False)
    assert code == 0, output
    assert any("-r requirements/serve-cpu.txt" in call for call in calls)
    assert any(call.startswith("uv pip uninstall") and call.endswith("torchvision torchaudio torchcodec")
               for call in calls)
    assert sum(call.endswith("-q torch==2.13.0") for call in calls) == 2   # the CPU path: the local +cpu wheel
    assert not any("torch.cuda" in call or "===" in call for call in calls)


def test_a_gpu_machine_whose_torch_cannot_see_the_gpu_fails_the_setup_and_says_so(tmp_path):
    code, output, calls = _setup(tmp_path, gpu=True, gpu_unseen=True)
    assert code == 1 and "nvidia-smi sees a GPU but an environment cannot use it" in output, output
    assert not (tmp_path / "main/.quant-gpu-checked").exists()
    code, output, calls = _setup(tmp_path / "ok", gpu=True)
    assert code == 0 and (tmp_path / "ok/main/.quant-gpu-checked").exists()
    before = len(calls)
    code, output, calls = _setup(tmp_path / "ok", gpu=True)   # nothing rebuilt: not asked again
    assert code == 0 and not any("torch.cuda" in call for call in calls[before:])


def test_both_environments_are_byte_compiled_once_per_install(tmp_path):
    """uv writes no .pyc, and with PYTHONDONTWRITEBYTECODE Python never does: without this every engine start
    would compile vllm from source in each of its three processes."""
    code, output, calls = _setup(tmp_path, gpu=False)
    assert code == 0, output
    compiled = [call for call in calls if "-m compileall" in call]
    assert sorted(call.split()[0] for call in compiled) == ["main-python", "serve-python"]   # built side by side
    assert (tmp_path / "main/.quant-compiled").exists() and (tmp_path / "serve/.quant-compiled").exists()
    code, output, calls = _setup(tmp_path, gpu=False)   # up to date (calls accumulate): nothing compiled again
    assert code == 0 and [call for call in calls if "-m compileall" in call] == compiled, output


def test_a_failed_environment_fails_the_setup_and_says_which(tmp_path):
    """The two environments are built side by side: one that fails stops nothing of the other, and the set-up
    exits non-zero naming it (nothing marks it built, so the next `make setup` builds it again)."""
    code, output, calls = _setup(tmp_path, gpu=False, fail_serve=True)
    failures = [line for line in output.splitlines() if line.endswith(" failed")]
    assert code != 0 and failures == [f"setup: the serving environment ({tmp_path}/serve) failed"], output
    assert (tmp_path / "main/.quant-stamp").exists() and (tmp_path / "main/.quant-compiled").exists()
    assert not (tmp_path / "serve/.quant-stamp").exists()


def test_gptqmodel_added_to_a_compiled_environment_is_compiled_too(tmp_path):
    """`make gptq-setup` after `make setup`: the packages it adds get their .pyc files as well."""
    venv, calls, bin_dir = tmp_path / "main", tmp_path / "calls", tmp_path / "bin"
    (venv / "bin").mkdir(parents=True)
    bin_dir.mkdir()
    (venv / ".quant-compiled").touch()
    # "installed?" (a script on stdin) says no until something was installed; pip freeze lists one package
    (venv / "bin/python").write_text(f'#!/bin/sh\necho "main-python $*" >> {calls}\n'
                                     f'[ "$1" = "-" ] && {{ grep -q install {calls} || exit 1; }}\n'
                                     '[ "$3" = "freeze" ] && echo "torch==2.13.0"\nexit 0\n')
    (bin_dir / "uv").write_text(f'#!/bin/sh\n[ "$1" = "--version" ] && echo "uv 0.0.0" && exit 0\n'
                                f'echo "uv $*" >> {calls}\n')
    for fake in (venv / "bin/python", bin_dir / "uv"):
        fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin", "QUANT_MAIN_VENV": str(venv)}
    proc = subprocess.run(["bash", "scripts/setup-gptqmodel.sh"], cwd=REPO, env=env, capture_output=True, text=True)
    lines = calls.read_text().splitlines()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    installs = [i for i, call in enumerate(lines) if call.startswith("uv pip install")]
    compiles = [i for i, call in enumerate(lines) if "-m compileall" in call]
    assert len(installs) == 2 and len(compiles) == 1 and compiles[0] > installs[-1], lines
    assert (venv / ".quant-compiled").exists()


def test_setup_keeps_a_torch_the_machine_has_where_llmcompressor_accepts_it(tmp_path):
    code, output, calls = _setup(tmp_path / "kept", gpu=True, torch_in_main_venv="2.12.0+cu128")
    main = [call for call in calls if f"{tmp_path}/kept/main/bin/python" in call]
    assert code == 0 and "keeping torch 2.12.0+cu128 (llmcompressor accepts 2.10.0 to 2.14.0)" in output, output
    assert not any("torch==" in call for call in main) and "requirements/main.lock" not in main[-1]
    code, output, calls = _setup(tmp_path / "old", gpu=True, torch_in_main_venv="2.9.1+cu126")
    main = [call for call in calls if f"{tmp_path}/old/main/bin/python" in call]
    assert code == 0 and main[0].endswith("-q torch===2.13.0") and "-c requirements/main.lock" in main[1]
    code, output, calls = _setup(tmp_path / "cpu-torch", gpu=True, torch_in_main_venv="2.13.0+cpu")
    main = [call for call in calls if f"{tmp_path}/cpu-torch/main/bin/python" in call]
    assert code == 0 and "keeping torch" not in output and main[0].endswith("-q torch===2.13.0"), output


def test_the_main_environment_accepts_the_torch_range_llmcompressor_accepts():
    import importlib.metadata
    import tomllib

    from packaging.requirements import Requirement

    ours = next(Requirement(r) for r in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
                ["dependencies"] if Requirement(r).name == "torch")
    theirs = next(Requirement(r) for r in importlib.metadata.requires("llmcompressor") if r.startswith("torch"))
    assert ours.specifier == theirs.specifier


def test_the_cuda_lock_is_resolved_against_the_cuda_build_of_setups_torch(tmp_path):
    """A local `+cpu` wheel of the same release has none of the CUDA build's dependencies (triton, the CUDA
    libraries): resolved against it, the CUDA lock pinned a triton the CUDA torch refuses."""
    calls, tools = tmp_path / "calls", tmp_path / "lock-venv"
    (tools / "bin").mkdir(parents=True)
    fake = tools / "bin/pip-compile"
    fake.write_text(f'#!/bin/sh\necho "pip-compile $*" >> {calls}\nwhile [ $# -gt 0 ]; do\n'
                    f'  [ "$1" = "-c" ] && cat "$2" >> {calls}\n  shift\ndone\n')
    fake.chmod(0o755)
    proc = subprocess.run(["bash", "scripts/lock.sh"], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "QUANT_LOCK_VENV": str(tools)})
    assert proc.returncode == 0, proc.stderr
    lines = calls.read_text().splitlines()
    cuda = next(i for i, line in enumerate(lines) if "serve-cuda.lock" in line)
    assert " -c " in lines[cuda] and lines[cuda + 1] == "torch===2.13.0"


def test_a_driver_older_than_the_cuda_build_stops_the_setup_before_any_download(tmp_path):
    code, output, calls = _setup(tmp_path / "r550", gpu=True, driver="550.54.15")
    assert code == 1 and calls == [], calls   # nothing installed, nothing downloaded
    assert "NVIDIA driver 550.54.15 (R550) is older than torch's CUDA 13.0 build needs (580.65.06 or newer, R580)" \
        in output and "docs/gpu.md" in output
    code, output, calls = _setup(tmp_path / "cu12", gpu=True, driver="550.54.15", extra_env={
        "QUANT_TORCH_CUDA": "12.8", "QUANT_ENGINE_PYTHON": str(tmp_path / "cu12/serve/bin/python")})
    assert code == 0, output   # CUDA 12 builds run on R550; the user's serving environment is not rebuilt
    assert "serving with" in output and not any("serve-cuda" in call for call in calls), calls
    assert any(call.startswith("serve-python -c import sys, torch") for call in calls)   # but asked for its GPU
    code, output, calls = _setup(tmp_path / "r580", gpu=True, driver="580.82.07")
    assert code == 0, output


def test_a_driver_that_does_not_answer_stops_the_setup_before_anything_is_installed(tmp_path):
    failed = ('echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver. Make sure that the '
              'latest NVIDIA driver is installed and running."; exit 9')
    code, output, calls = _setup(tmp_path / "dead", gpu=False, nvidia_smi=failed)
    assert code == 1 and "the NVIDIA driver does not answer (NVIDIA-SMI has failed because it couldn't" in output
    assert "QUANT_SETUP_CPU=1" in output and calls == [], (output, calls)   # not the CPU stack, nothing fetched
    code, output, calls = _setup(tmp_path / "hung", gpu=False, nvidia_smi="exec sleep 30",
                                 extra_env={"QUANT_NVIDIA_SMI_TIMEOUT": "1"})
    assert code == 1 and "does not answer (no answer within 1 s)" in output and calls == [], output
    code, output, calls = _setup(tmp_path / "none", gpu=False, nvidia_smi='echo "No devices were found"; exit 6')
    assert code == 0 and any("-r requirements/serve-cpu.txt" in call for call in calls), output   # no GPU: CPU
    code, output, calls = _setup(tmp_path / "opt-out", gpu=False, nvidia_smi=failed, extra_env={"QUANT_SETUP_CPU": "1"})
    assert code == 0 and any("-r requirements/serve-cpu.txt" in call for call in calls), output
