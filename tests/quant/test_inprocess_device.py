"""The in-process fallback on the sweep's device: `--device auto` is CUDA where a GPU is visible (a fake
nvidia-smi here), a CPU torch beside a GPU is refused, not silently used; on the CPU the time is estimated from
the parameters and the items, and above the limit the variant is recorded unsupported and not scored unless the
user opts in; the report says which."""

from __future__ import annotations

import json
import struct
import sys

import pytest

from core.child import ChildError
from core.recipe import parse_recipe
from core.store import Cache
from quant import inprocess_plan
from quant.context import Checkpoint, StageError, SweepContext
from quant.inprocess_plan import (CPU_FLOPS_PER_CORE, CPU_LIMIT_S, PROMPT_TOKENS, cpu_estimate, inprocess_device,
                                  parameter_count, sweep_device)
from quant.measure import _measure_inprocess
from quant.progress import Reporter
from reports.markdown import scored_note
from tests.fake_gpu import gpu, install
from tests.helpers import DEMO_MODEL

EIGHT_B = {"embed": [128256, 4096], "layers": [32, 218_112_000], "head": [128256, 4096]}   # 8.03B parameters


def header_only_checkpoint(path, shapes: dict[str, list[int]]):
    """A checkpoint whose safetensors file is its header alone: enough for the parameter count."""
    path.mkdir(parents=True, exist_ok=True)
    header = json.dumps({name: {"dtype": "BF16", "shape": shape, "data_offsets": [0, 0]}
                         for name, shape in shapes.items()}).encode()
    (path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    (path / "config.json").write_text('{"model_type": "llama", "torch_dtype": "bfloat16"}')
    return path


def test_auto_is_cuda_where_a_gpu_is_visible_and_the_cpu_elsewhere(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))   # no nvidia-smi
    assert sweep_device("auto") == "cpu"
    install(tmp_path, monkeypatch, [gpu(0)])
    assert sweep_device("auto") == "cuda"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert sweep_device("auto") == "cpu"
    assert sweep_device("cuda:1") == "cuda:1" and sweep_device("cpu") == "cpu"


def test_a_gpu_that_torch_cannot_use_is_an_error_not_a_silent_cpu_run():
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine's torch has CUDA")
    with pytest.raises(StageError, match="cannot use CUDA .*quant doctor"):
        inprocess_device("cuda")
    assert inprocess_device("cpu") == "cpu"


def test_parameters_are_counted_from_the_safetensors_headers():
    from safetensors import safe_open
    with safe_open(DEMO_MODEL / "model.safetensors", "pt") as f:
        expected = sum(_numel(f.get_slice(k).get_shape()) for k in f.keys())
    assert parameter_count(DEMO_MODEL) == expected and 3e6 < expected < 4e6


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def test_the_cpu_estimate_is_parameters_times_tokens_times_items(tmp_path):
    model = header_only_checkpoint(tmp_path / "m", EIGHT_B)
    tasks = parse_recipe("name: r\nmodel: demo\nvariants: [{name: b, baseline: true}]\ntasks:\n"
                         "  - humaneval_instruct\n  - {name: demo_math, limit: 10}\n").tasks
    estimate = cpu_estimate(model, tasks, cores=2)
    tokens = 164 * (PROMPT_TOKENS + 1024) + 10 * (PROMPT_TOKENS + 96)   # items x (prompt + max_gen_toks)
    assert estimate.parameters == parameter_count(model) and 8.0e9 < estimate.parameters < 8.1e9
    assert (estimate.items, estimate.tokens) == (174, tokens)
    assert estimate.seconds == pytest.approx(2 * estimate.parameters * tokens / (CPU_FLOPS_PER_CORE * 2))
    assert estimate.seconds > CPU_LIMIT_S and "28." in estimate.describe()   # about 28 hours on 2 cores


RECIPE = "name: r\nmodel: demo\ntasks: [humaneval_instruct]\nvariants:\n  - {name: bf16, baseline: true}\n" \
         "  - {name: w2, scheme: W4A16}\n"


def context(tmp_path, model_dir, allow: bool = False) -> SweepContext:
    ctx = SweepContext(recipe=parse_recipe(RECIPE), out=tmp_path / "run", cache=Cache(tmp_path / "cache"),
                       model_dir=model_dir, model_key="m", engine_python=sys.executable, engine_version=None,
                       reporter=Reporter(quiet=True), device="cpu")
    ctx.allow_long_cpu_eval = allow
    return ctx


def unsupported_record() -> dict:
    return {"name": "w2", "status": "unsupported", "reason": "engine: no kernel", "served": False,
            "eval_backend": "inprocess", "accuracy": {}, "perf": {}, "memory": {}}


def test_an_8b_variant_is_not_scored_on_the_cpu_unless_the_user_opts_in(tmp_path, monkeypatch):
    model = header_only_checkpoint(tmp_path / "m", EIGHT_B)
    checkpoint = Checkpoint(path=model, key="ck", manifest={}, size_bytes=0)
    loads = []
    import evals.backends.inprocess_child as backend   # the model loads in a child process (core/child.py)
    monkeypatch.setattr(backend, "ChildLM", lambda *a, **kw: loads.append(kw) or (_ for _ in ()).throw(
        ChildError("RuntimeError: not loaded in this test")))
    ctx = context(tmp_path, model)
    record = unsupported_record()
    _measure_inprocess(ctx, ctx.recipe.variants[1], checkpoint, record)
    assert loads == [] and record["accuracy"] == {} and record["eval_backend"] is None
    assert record["status"] == "unsupported" and "not scored: in-process on the CPU it would take about" in record["reason"]
    assert "--allow-long-cpu-eval" in record["reason"] and record["inprocess_device"] == "cpu"
    assert record["inprocess_cpu_estimate"]["seconds"] > CPU_LIMIT_S

    record = unsupported_record()
    with pytest.raises(StageError, match="not loaded in this test"):   # opted in: it goes on to load the model
        _measure_inprocess(context(tmp_path, model, allow=True), ctx.recipe.variants[1], checkpoint, record)
    assert loads == [{"dtype": ctx.inprocess_dtype, "device": "cpu"}]   # bfloat16 or float32 by this host's CPU


def test_on_a_gpu_the_fallback_loads_on_it_without_an_estimate(tmp_path, monkeypatch):
    model = header_only_checkpoint(tmp_path / "m", EIGHT_B)
    loads = []
    import evals.backends.inprocess_child as backend   # the model loads in a child process (core/child.py)
    monkeypatch.setattr(backend, "ChildLM", lambda *a, **kw: loads.append(kw) or (_ for _ in ()).throw(
        ChildError("RuntimeError: no kernels here")))
    monkeypatch.setattr(inprocess_plan, "inprocess_device", lambda device: device)   # torch would say: no CUDA
    monkeypatch.setattr("quant.measure.inprocess_device", lambda device: device)
    ctx = context(tmp_path, model)
    ctx.device = "cuda"
    ctx.engine_facts = {"device": "cuda", "gpus": [{"bf16": False}]}   # a V100: float16
    record = unsupported_record()
    with pytest.raises(StageError):
        _measure_inprocess(ctx, ctx.recipe.variants[1], Checkpoint(model, "ck", {}, 0), record)
    assert loads == [{"dtype": "float16", "device": "cuda"}] and "inprocess_cpu_estimate" not in record


class V:   # what scored_note reads of a results.json variant
    def __init__(self, **fields):
        self.__dict__.update({"status": "unsupported", "served": False, "reason": "engine: no kernel", **fields})


def test_the_report_says_whether_an_unserved_variant_was_scored_and_where():
    assert scored_note(V(eval_backend="inprocess", inprocess_device="cuda")) == " (scored in-process on cuda)"
    assert scored_note(V(eval_backend=None)) == " (not scored)"
    assert scored_note(V(eval_backend=None, reason="engine: x; not scored: ...")) == ""   # the reason says it
    assert scored_note(V(eval_backend="inprocess", status="failed")) == ""
