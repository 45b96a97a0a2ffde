"""What the suite decides by the device the engine serves on, shown on a CPU machine with a fake nvidia-smi
(tests/fake_gpu.py) and an engine python whose probe says vLLM on CUDA: the GPUs the engine facts list, the
dtype `auto` becomes (vLLM's own rule on a GPU, ours on a CPU), the engine-core niceness (CPU engines only),
and when a perf level counts as measured under foreign load on a GPU host."""

from __future__ import annotations

import json
import os

import pytest

from perf.engines.dtypes import checkpoint_dtype, gpu_auto_dtype, served_dtype
from perf.engines.gpus import parse_gpus, visible, visible_gpus
from perf.engines.vllm import engine_facts
from perf.host_load import CpuReading, gpu_foreign_processes, host_load
from tests.fake_gpu import H100, V100, cuda_engine_python, gpu, install


def test_the_engine_facts_of_a_cuda_engine_list_the_gpus_it_would_see(tmp_path, monkeypatch):
    install(tmp_path, monkeypatch, [gpu(0, H100, free_mib=80000), gpu(1, V100, free_mib=1000)])
    facts = engine_facts(str(cuda_engine_python(tmp_path)))
    assert facts["device"] == "cuda" and "cpu_isa" not in facts
    assert [(g["index"], g["name"], g["memory_free_bytes"] >> 20, g["bf16"]) for g in facts["gpus"]] == [
        (0, H100[0], 80000, True), (1, V100[0], 1000, False)]
    facts = engine_facts(str(cuda_engine_python(tmp_path)), {"CUDA_VISIBLE_DEVICES": "1"})   # engine.env
    assert [g["index"] for g in facts["gpus"]] == [1]


def test_cuda_visible_devices_chooses_by_index_or_uuid_and_stops_at_the_first_unknown():
    gpus = parse_gpus("0, GPU-aaa, A, 100, 50, 8.0\n1, GPU-bbb, B, 100, 60, 7.5\n2, GPU-ccc, C, 100, 70, [N/A]\n")
    assert [g.index for g in visible(gpus, {})] == [0, 1, 2]
    assert [g.index for g in visible(gpus, {"CUDA_VISIBLE_DEVICES": "2,0"})] == [2, 0]
    assert [g.index for g in visible(gpus, {"CUDA_VISIBLE_DEVICES": "GPU-bbb"})] == [1]
    assert visible(gpus, {"CUDA_VISIBLE_DEVICES": ""}) == [] and visible(gpus, {"CUDA_VISIBLE_DEVICES": "-1"}) == []
    assert [g.index for g in visible(gpus, {"CUDA_VISIBLE_DEVICES": "0,7,1"})] == [0]
    assert gpus[2].compute_cap is None and not gpus[2].bf16 and gpus[1].memory_free_bytes == 60 << 20


def test_without_nvidia_smi_there_are_no_gpus(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert visible_gpus() == []


def _model(tmp_path, dtype: str | None):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", **({"torch_dtype": dtype} if dtype else {})}))
    return tmp_path


@pytest.mark.parametrize("checkpoint, bf16, expected", [
    ("bfloat16", True, "bfloat16"),    # the checkpoint's own dtype
    ("float16", True, "float16"),
    ("bfloat16", False, "float16"),    # a GPU without bfloat16 (compute capability < 8.0)
    ("float32", True, "bfloat16"),     # float32 downcast to the GPU's first supported dtype
    ("float32", False, "float16"),
    (None, True, "bfloat16"),          # no dtype declared: float32, downcast
])
def test_auto_on_a_gpu_is_what_vllms_auto_is(checkpoint, bf16, expected):
    assert gpu_auto_dtype(checkpoint, bf16) == expected


def test_auto_is_decided_by_the_engines_device(tmp_path):
    fp16 = _model(tmp_path / "fp16", "float16")
    h100 = {"device": "cuda", "gpus": [{"bf16": True}]}
    v100 = {"device": "cuda", "gpus": [{"bf16": False}, {"bf16": True}]}   # every GPU must have it
    assert served_dtype("auto", h100, fp16) == "float16"          # not bfloat16: the checkpoint's dtype
    assert served_dtype("auto", v100, _model(tmp_path / "bf16", "bfloat16")) == "float16"
    assert served_dtype("auto", {"device": "cpu", "cpu_isa": "avx512"}, fp16) == "bfloat16"   # CPU: ours
    assert served_dtype("auto", {"device": "cpu", "cpu_isa": "avx2"}, fp16) == "float32"
    assert served_dtype("auto", {}, fp16) == "bfloat16"           # device unknown
    assert served_dtype("float32", h100, fp16) == "float32"       # an explicit dtype is kept everywhere
    assert checkpoint_dtype(_model(tmp_path / "t5", None)) is None
    (tmp_path / "t5" / "config.json").write_text('{"dtype": "bfloat16"}')   # transformers 5's key
    assert checkpoint_dtype(tmp_path / "t5") == "bfloat16"


def reading(at: float, busy: float, own: float, cpus: int = 16) -> CpuReading:
    return CpuReading(at=at, host_busy_s=busy, own_s=own, cpus=cpus)


def test_on_a_gpu_host_foreign_cpu_counts_only_where_it_could_slow_the_load_generator():
    before = reading(0, 0, 0)
    quiet_enough = host_load(before, reading(10, 10 + 6, 10), gpu_foreign=[])   # 0.6 foreign cores, 14.4 idle
    assert quiet_enough["foreign_cores"] == 0.6 and quiet_enough["rule"] == "gpu"
    assert not quiet_enough["foreign_load"] and quiet_enough["idle_cores"] == pytest.approx(14.4)
    assert host_load(before, reading(10, 16, 10))["foreign_load"]   # the same on a CPU engine: flagged
    busy = host_load(before, reading(10, 155, 10), gpu_foreign=[])   # 14.5 foreign cores: 0.5 idle
    assert busy["foreign_load"] and busy["idle_cores"] == pytest.approx(0.5)
    other = [{"pid": 1, "gpu_uuid": "GPU-x", "used_bytes": 1 << 30}]
    shared_gpu = host_load(before, reading(10, 10, 10), gpu_foreign=other)   # no foreign CPU at all
    assert shared_gpu["foreign_load"] and shared_gpu["gpu_foreign_processes"] == other


def test_a_process_of_someone_else_on_the_variants_gpu_is_foreign_and_ours_is_not(tmp_path, monkeypatch):
    other = 1   # init: a process that exists and is not of our tree
    install(tmp_path, monkeypatch, [gpu(0), gpu(1)], apps=[
        {"pid": os.getpid(), "gpu_uuid": gpu(0)["uuid"], "used_memory": 70000},
        {"pid": other, "gpu_uuid": gpu(0)["uuid"], "used_memory": 2000},
        {"pid": other, "gpu_uuid": gpu(1)["uuid"], "used_memory": 2000},
        {"pid": 4_000_000, "gpu_uuid": gpu(0)["uuid"], "used_memory": 9000}])   # not visible here
    # our own process is listed and seen: we are not in a container of our own, so an unseen PID is another's
    assert gpu_foreign_processes([gpu(0)["uuid"]]) == [
        {"pid": other, "gpu_uuid": gpu(0)["uuid"], "used_bytes": 2000 << 20},
        {"pid": 4_000_000, "gpu_uuid": gpu(0)["uuid"], "used_bytes": 9000 << 20, "unseen": True}]
    assert len(gpu_foreign_processes([])) == 3   # GPUs unknown: any of them


def test_engine_core_niceness_is_for_cpu_engines_only():
    from core.recipe import parse_recipe
    from quant.measure import _engine_core_nice

    class Ctx:
        recipe = parse_recipe("name: r\nmodel: demo\ntasks: [demo_math]\nvariants: [{name: bf16, baseline: true}]\n")
        engine_facts = {"device": "cpu"}

    assert _engine_core_nice(Ctx) == 10
    Ctx.engine_facts = {"device": "cuda"}
    assert _engine_core_nice(Ctx) is None


def test_the_fake_nvidia_smi_answers_as_the_real_one_does(tmp_path, monkeypatch):
    import subprocess
    install(tmp_path, monkeypatch, [gpu(0)])
    out = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.total", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    assert out == f"0, {H100[1]}\n"
