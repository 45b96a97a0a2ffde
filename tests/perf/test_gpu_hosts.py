"""GPU hosts as real drivers describe them, through a fake nvidia-smi (tests/fake_gpu.py): a hang, a driver that
does not answer, "No devices were found", bytes that are not UTF-8, [N/A] memory, driver 470 without compute_cap,
MIG instances, mixed A100/H100 hosts, Prohibited and Exclusive_Process compute modes, ECC errors. What the suite
reads of each, which GPUs a variant gets, what identity it records and what `quant doctor` says."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from core.recipe import parse_recipe
from core.store import Cache
from perf.engines import nvidia_smi
from perf.engines.dtypes import served_dtype
from perf.engines.gpu_choice import NoGpuFree, choose_gpus
from perf.engines.gpus import driver_version, gpu_processes, visible_gpus
from perf.engines.process import gpu_used_bytes
from quant.context import SweepContext
from quant.doctor import gpu_check
from quant.gpu_pin import pinned
from quant.progress import Reporter
from reports.gate_hardware import hardware, hardware_note
from tests.fake_gpu import A100, H100, gpu, install
from tests.helpers import DEMO_MODEL, REPO

CUDA = {"device": "cuda", "distribution": "vllm", "version": "0.32.0", "driver": "580.65.06", "cuda": "13.0"}


def context(tmp_path, variants: str = "  - {name: bf16, baseline: true}\n", engine_args: str = "{}") -> SweepContext:
    recipe = parse_recipe(f"name: r\nmodel: demo\ntasks: [demo_math]\nengine: {{args: {engine_args}}}\n"
                          f"variants:\n{variants}")
    return SweepContext(recipe=recipe, out=tmp_path / "run", cache=Cache(tmp_path / "cache"), model_dir=DEMO_MODEL,
                        model_key="m", engine_python="python", engine_version="0.32.0", reporter=Reporter(quiet=True),
                        engine_facts=dict(CUDA), device="cuda")


def test_a_hung_nvidia_smi_is_asked_once_and_doctor_says_so(tmp_path, monkeypatch):
    fake = install(tmp_path, monkeypatch, [gpu(0)])
    fake.set([gpu(0)], hang=30)
    monkeypatch.setenv("QUANT_NVIDIA_SMI_TIMEOUT", "1")
    assert visible_gpus() == [] and driver_version() is None and gpu_processes() is None
    assert gpu_used_bytes() is None and visible_gpus() == []
    assert len(fake.calls()) == 1   # remembered: not asked again and again
    assert nvidia_smi.problem() == "nvidia-smi did not answer within 1 s"
    check = gpu_check(CUDA, [])
    assert not check.ok and "nvidia-smi did not answer within 1 s" in check.line()


def test_a_driver_that_does_not_answer_is_remembered_and_named(tmp_path, monkeypatch):
    fake = install(tmp_path, monkeypatch, [gpu(0)])
    fake.set([gpu(0)], broken=True)
    assert visible_gpus() == [] and visible_gpus() == [] and len(fake.calls()) == 1
    assert "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver" in nvidia_smi.problem()
    assert "couldn't communicate with the NVIDIA driver" in gpu_check(CUDA, []).line()


def test_no_devices_is_an_answer_not_a_failure(tmp_path, monkeypatch):
    fake = install(tmp_path, monkeypatch, [])
    assert visible_gpus() == [] and gpu_processes() == [] and nvidia_smi.problem() is None
    visible_gpus()
    assert len(fake.calls()) == 3   # asked again each time: a GPU may appear


def test_bytes_that_are_not_utf8_are_read_leniently(tmp_path, monkeypatch):
    install(tmp_path, monkeypatch, [gpu(0, name="NVIDIA H100 \udcff80GB"), gpu(1)])
    first, second = visible_gpus()
    assert first.name == "NVIDIA H100 \ufffd80GB" and first.memory_total_bytes == H100[1] << 20
    assert gpu_check(CUDA, [first, second]).ok
    ctx = context(tmp_path)
    with pinned(ctx, ctx.recipe.variants[0]) as chosen:
        assert [g.index for g in chosen] == [0]


def test_memory_nvidia_smi_cannot_tell_is_unknown_not_zero(tmp_path, monkeypatch):
    install(tmp_path, monkeypatch, [gpu(0, memory_total="[N/A]", memory_free="[N/A]", memory_used="[N/A]"),
                                    gpu(1, memory_free="[Not Supported]", utilization_gpu="[Not Supported]")])
    first, second = visible_gpus()
    assert first.memory_total_bytes is None and first.memory_free_bytes is None and second.utilization is None
    assert [g.index for g in choose_gpus([first, second], 2, 0.9, [])] == [0, 1]   # not refused as "0.0 GiB free"
    assert "0 NVIDIA H100 80GB HBM3 ? of ? GiB free" in gpu_check(CUDA, [first, second]).line()


def test_driver_470_without_compute_cap_still_lists_every_gpu(tmp_path, monkeypatch):
    fake = install(tmp_path, monkeypatch, [gpu(0, A100, driver="470.256.02"), gpu(1, A100)])
    fake.set([gpu(0, A100, driver="470.256.02"), gpu(1, A100)], unknown_fields=["compute_cap"])
    found = visible_gpus()
    assert [g.index for g in found] == [0, 1] and all(g.compute_cap is None for g in found)
    assert driver_version() == "470.256.02" and nvidia_smi.problem() is None
    assert "compute capability unknown" in gpu_check(CUDA, found).line() and gpu_check(CUDA, found).ok
    facts = {"device": "cuda", "gpus": [g.as_fact() for g in found]}
    assert served_dtype("auto", facts, None) == "bfloat16"   # unknown: as a current GPU, not float16


def test_mig_instances_are_the_pool_one_per_process_with_their_own_memory(tmp_path, monkeypatch):
    install(tmp_path, monkeypatch, [gpu(0, migs=["1g.10gb+me", "3g.40gb"])])
    small, large = visible_gpus()   # CUDA_VISIBLE_DEVICES unset: a GPU in MIG mode is its instances
    assert (small.name, small.memory_total_bytes, small.parent) == (
        "NVIDIA H100 80GB HBM3 MIG 1g.10gb+me", 10 * 10**9, gpu(0)["uuid"])
    assert large.memory_total_bytes == 40 * 10**9 and large.memory_free_bytes is None
    ctx = context(tmp_path, engine_args="{tensor_parallel_size: 2}")
    with pytest.raises(NoGpuFree, match="a process sees one MIG instance"):
        with pinned(ctx, ctx.recipe.variants[0]):
            pass
    ctx = context(tmp_path)
    with pinned(ctx, ctx.recipe.variants[0]) as chosen:
        assert len(chosen) == 1 and chosen[0].uuid.startswith("MIG-")
        assert os.environ["CUDA_VISIBLE_DEVICES"] == chosen[0].uuid


@pytest.mark.parametrize("host, kind, indices", [
    ([A100, H100, H100], H100[0], [1, 2]),   # the kind that fits, not the first GPU's
    ([A100, H100, A100], A100[0], [0, 2]),
])
def test_on_a_mixed_host_the_identity_is_the_gpus_chosen(tmp_path, monkeypatch, host, kind, indices):
    install(tmp_path, monkeypatch, [gpu(i, model) for i, model in enumerate(host)])
    ctx = context(tmp_path, engine_args="{tensor_parallel_size: 2}")
    with pinned(ctx, ctx.recipe.variants[0]) as chosen:
        assert [g.index for g in chosen] == indices
        assert ctx.variant_gpu["name"] == kind and ctx.variant_gpu["count"] == 2
        key_while_pinned = ctx.engine_key
    assert ctx.variant_gpu is None and ctx.engine_key != key_while_pinned


def test_prohibited_exclusive_busy_and_ecc_failing_gpus_are_never_picked(tmp_path, monkeypatch):
    install(tmp_path, monkeypatch, [gpu(0, compute_mode="Prohibited"), gpu(1, compute_mode="Exclusive_Process"),
                                    gpu(2, ecc_errors_uncorrected_volatile_total=2),
                                    gpu(3, compute_mode="Exclusive_Process"),
                                    gpu(4, ecc_errors_uncorrected_volatile_total="[N/A]")],   # ECC off: unknown
            apps=[{"pid": 7, "gpu_uuid": gpu(1)["uuid"], "used_memory": 10}])
    pool, processes = visible_gpus(), gpu_processes()
    assert [g.index for g in choose_gpus(pool, 2, 0.9, processes)] == [3, 4]
    with pytest.raises(NoGpuFree) as refused:
        choose_gpus(pool, 3, 0.9, processes)
    for why in ("0 NVIDIA H100 80GB HBM3: compute mode Prohibited",
                "1 NVIDIA H100 80GB HBM3: compute mode Exclusive_Process, another process on it",
                "2 NVIDIA H100 80GB HBM3: 2 uncorrectable ECC error(s)"):
        assert why in str(refused.value)


def test_a_variants_own_parallel_sizes_choose_and_name_its_gpus(tmp_path, monkeypatch):
    install(tmp_path, monkeypatch, [gpu(0), gpu(1)])
    variants = ("  - {name: bf16, baseline: true}\n"
                "  - {name: tp2, engine_args: {tensor_parallel_size: 2}}\n")
    ctx = context(tmp_path, variants)
    keys = []
    for variant, count in zip(ctx.recipe.variants, (1, 2)):
        with pinned(ctx, variant) as chosen:
            assert len(chosen) == count and ctx.variant_gpu["count"] == count
            keys.append(ctx.engine_key)
    assert keys[0] != keys[1]
    # doctor counts what each variant needs: ready on two GPUs, not on one
    assert gpu_check(CUDA, visible_gpus(), ctx.recipe).ok
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    check = gpu_check(CUDA, visible_gpus(), ctx.recipe)
    assert not check.ok and "variant tp2: the engine needs 2 GPU(s)" in check.line()


def test_used_memory_is_read_on_the_variants_gpus_only(tmp_path, monkeypatch):
    install(tmp_path, monkeypatch, [gpu(0, free_mib=1000), gpu(1, free_mib=H100[1] - 100)])
    assert gpu_used_bytes() == ((H100[1] - 1000) + 100) << 20   # unpinned: every GPU
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", gpu(1)["uuid"])
    assert gpu_used_bytes() == 100 << 20


def test_the_gate_compares_the_gpus_each_variant_ran_on():
    h100x2 = {"name": H100[0], "count": 2, "compute_cap": 9.0, "driver": "580.65.06", "cuda": "13.0"}
    run = {"engine": {"device": "cuda", "gpu": {**h100x2, "name": A100[0]}}}
    variant = {"ran_on": {"gpu": h100x2}}
    assert hardware(run, variant) == h100x2 and hardware(run)["name"] == A100[0]
    assert hardware_note(run, run, True, variant, [variant]) is None
    assert "candidate on 1x" in hardware_note(run, run, False, variant, [{"ran_on": {"gpu": {**h100x2, "count": 1}}}])


def test_gpu_check_runs_against_a_stand_in(tmp_path, monkeypatch):
    install(tmp_path, monkeypatch, [gpu(0, A100), gpu(1, migs=["3g.40gb"])])
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks/gpu_check.py"), "--out", str(out), "--only",
                           "host"], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    machine = json.loads((out / "host.json").read_text())
    assert "error" not in machine, machine
    assert [g["name"] for g in machine["suite_sees"]] == [A100[0], f"{H100[0]} MIG 3g.40gb"]
    assert machine["driver"] == "580.65.06" and machine["gpu"].startswith("GPU 0: NVIDIA A100")


def test_the_record_and_the_run_name_the_gpus_each_variant_ran_on(tmp_path, monkeypatch):
    import quant.sweep as sweep
    install(tmp_path, monkeypatch, [gpu(0, A100), gpu(1), gpu(2)])
    variants = ("  - {name: bf16, baseline: true}\n"
                "  - {name: tp2, engine_args: {tensor_parallel_size: 2}}\n")
    ctx = context(tmp_path, variants)
    monkeypatch.setattr(sweep, "_run_pinned", lambda ctx, variant: {"name": variant.name, "ran_on": {}})
    records = {v.name: sweep.run_variant(ctx, v) for v in ctx.recipe.variants}
    bf16 = records["bf16"]["ran_on"]
    assert bf16["gpu"]["name"] == A100[0] and bf16["gpus"] == [gpu(0)["uuid"]]
    assert records["tp2"]["ran_on"]["gpu"] == {"name": H100[0], "count": 2, "compute_cap": 9.0,
                                               "driver": CUDA["driver"], "cuda": CUDA["cuda"]}
    results = {"engine": {"gpu": {"name": f"{A100[0]} + {H100[0]}", "count": 1}}, "variants": records}
    sweep._note_gpu_identity(results)
    assert "gpu" not in results["engine"]   # two kinds in one run: each variant's ran_on.gpu says which
    results["variants"] = {"tp2": records["tp2"]}
    sweep._note_gpu_identity(results)
    assert results["engine"]["gpu"] == records["tp2"]["ran_on"]["gpu"]
