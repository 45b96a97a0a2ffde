"""Which GPUs a variant runs on, and who else is on them, decided from a fake nvidia-smi (tests/fake_gpu.py): a
busy GPU 0, a MIG layout, a container that hides the host's PIDs."""

from __future__ import annotations

import os

import pytest

from core.recipe import parse_recipe
from core.store import Cache
from perf.engines.gpu_choice import NoGpuFree, choose_gpus, engine_gpu_count, engine_utilization
from perf.engines.gpus import GpuProcess, gpu_processes, visible_gpus
from perf.host_load import gpu_foreign_processes
from perf.run import variant_gpu_uuids
from quant.context import SweepContext
from quant.gpu_pin import pinned
from quant.progress import Reporter
from tests.fake_gpu import A100, gpu, install
from tests.helpers import DEMO_MODEL

H100_MIB = 81559


def context(tmp_path, engine_args: str = "{}") -> SweepContext:
    recipe = parse_recipe(f"name: r\nmodel: demo\ntasks: [demo_math]\nengine: {{args: {engine_args}}}\n"
                          "variants:\n  - {name: bf16, baseline: true}\n")
    return SweepContext(recipe=recipe, out=tmp_path / "run", cache=Cache(tmp_path / "cache"), model_dir=DEMO_MODEL,
                        model_key="m", engine_python="python", engine_version="0.32.0", reporter=Reporter(quiet=True),
                        engine_facts={"device": "cuda"}, device="cuda")


def test_a_busy_gpu_0_is_passed_over_and_the_choice_reaches_every_child(tmp_path, monkeypatch):
    install(tmp_path, monkeypatch, [gpu(0, free_mib=20000), gpu(1), gpu(2, utilization=80)],
            apps=[{"pid": 1, "gpu_uuid": gpu(0)["uuid"], "used_memory": 60000}])
    ctx = context(tmp_path)
    with pinned(ctx, ctx.recipe.variants[0]) as chosen:
        assert [g.uuid for g in chosen] == [gpu(1)["uuid"]]   # 0 lacks 90% free; 2 is as free but busier
        assert os.environ["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"   # CUDA numbers GPUs as nvidia-smi does
        assert os.environ["CUDA_VISIBLE_DEVICES"] == gpu(1)["uuid"]   # inherited by the quantizer, server, children
        assert variant_gpu_uuids() == [gpu(1)["uuid"]]   # the foreign-load check looks at the variant's GPU only
    assert "CUDA_VISIBLE_DEVICES" not in os.environ and "CUDA_DEVICE_ORDER" not in os.environ   # the user's again

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")   # the user's pool is the busy GPU alone
    with pytest.raises(NoGpuFree, match=r"needs 1 GPU\(s\) of one kind with 90% of their memory free"
                                        r".*usable: none \(0 NVIDIA H100 80GB HBM3: 19.5 of 79.6 GiB free\)"):
        with pinned(ctx, ctx.recipe.variants[0]):
            pass
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"


def test_tensor_parallel_takes_as_many_gpus_least_loaded_first(tmp_path, monkeypatch):
    install(tmp_path, monkeypatch, [gpu(0, utilization=50), gpu(1), gpu(2), gpu(3, free_mib=1000)],
            apps=[{"pid": 1, "gpu_uuid": gpu(1)["uuid"], "used_memory": 2000}])
    ctx = context(tmp_path, "{tensor_parallel_size: 2, gpu_memory_utilization: 0.5}")
    with pinned(ctx, ctx.recipe.variants[0]) as chosen:
        # no foreign memory first, then the lower utilization
        assert [g.uuid for g in chosen] == [gpu(2)["uuid"], gpu(0)["uuid"]]
    assert engine_gpu_count({"tensor-parallel-size": "4", "pipeline_parallel_size": 2}) == 8
    assert engine_utilization({}) == 0.9 and engine_utilization({"gpu_memory_utilization": "x"}) == 0.9


def test_a_pool_of_two_kinds_measures_on_one_kind_that_fits(tmp_path, monkeypatch):
    install(tmp_path, monkeypatch, [gpu(0, A100), gpu(1), gpu(2)])
    assert [g.index for g in choose_gpus(visible_gpus(), 1, 0.9, [])] == [0]
    assert [g.index for g in choose_gpus(visible_gpus(), 2, 0.9, [])] == [1, 2]   # the two H100s, not A100 + H100
    with pytest.raises(NoGpuFree, match=r"needs 3 GPU\(s\) of one kind.*usable: NVIDIA A100-SXM4-80GB, NVIDIA H100"):
        choose_gpus(visible_gpus(), 3, 0.9, [])


def test_mig_instances_named_in_cuda_visible_devices_are_the_pool(tmp_path, monkeypatch):
    install(tmp_path, monkeypatch, [gpu(0, A100, migs=["3g.40gb", "3g.40gb"]), gpu(1, A100)])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-00000001-fake")
    [instance] = visible_gpus()
    assert instance.uuid == "MIG-00000001-fake" and instance.name == "NVIDIA A100-SXM4-80GB MIG 3g.40gb"
    assert instance.memory_total_bytes == 40 * 10**9 and instance.compute_cap == 8.0
    assert variant_gpu_uuids() == [gpu(0)["uuid"]]   # nvidia-smi lists processes by the whole GPU's UUID
    ctx = context(tmp_path)
    with pinned(ctx, ctx.recipe.variants[0]) as chosen:
        assert [g.uuid for g in chosen] == ["MIG-00000001-fake"]


def test_in_a_container_unseen_processes_count_by_the_memory_beyond_our_servers(tmp_path, monkeypatch):
    host_pid, other_host_pid = 4_000_000, 4_000_001   # PIDs of the host's namespace: not visible here
    install(tmp_path, monkeypatch, [gpu(0), gpu(1)], apps=[
        {"pid": host_pid, "gpu_uuid": gpu(0)["uuid"], "used_memory": 70000},   # our server, seen from the host
        {"pid": other_host_pid, "gpu_uuid": gpu(0)["uuid"], "used_memory": 9000}])   # another tenant
    ours = 70000 << 20   # what our server holds, from the growth of used memory since it started
    assert gpu_foreign_processes([gpu(0)["uuid"]], own_bytes=ours) == [
        {"pid": None, "gpu_uuid": gpu(0)["uuid"], "used_bytes": 9000 << 20, "unseen": True}]
    assert gpu_foreign_processes([gpu(1)["uuid"]], own_bytes=ours) == []   # not on the variant's GPU
    assert gpu_foreign_processes([gpu(0)["uuid"]], own_bytes=ours + (9000 << 20)) == []   # all of it ours
    assert gpu_processes() == [GpuProcess(host_pid, gpu(0)["uuid"], 70000 << 20),
                               GpuProcess(other_host_pid, gpu(0)["uuid"], 9000 << 20)]
