"""Sensitivity analysis: its rounding is llmcompressor's, its units and keep lists are right, and a variant's
`sensitivity: {keep_top: K}` becomes K units kept in 16-bit."""

import json

import pytest

from quant.progress import Reporter
from core.recipe import Calibration, Sensitivity, Task, Variant, WeightSpec, parse_recipe, RecipeError
from quant.sensitivity_stage import ranking, with_kept_modules, write_report
from core.store import Cache
from quantize.sensitivity import fake_quantize_weight, is_kept, keep_random, keep_top, units_of, weight_args
from tests.helpers import DEMO_MODEL



def test_rounding_matches_llmcompressors_rtn(probe_model, tmp_path):
    """The analysis's fake quantization gives exactly the weights llmcompressor's RTN checkpoint holds."""
    import torch
    from safetensors.torch import load_file

    from quantize import quantize_variant

    variant = Variant(name="w2", weights=WeightSpec(num_bits=2, group_size=128), ignore=["lm_head"])
    quantize_variant(probe_model, variant, Calibration(), tmp_path / "dense", dense=True)
    original = load_file(str(probe_model / "model.safetensors"))
    dense = load_file(str(tmp_path / "dense" / "model.safetensors"))
    name = "model.layers.1.mlp.down_proj.weight"
    ours = fake_quantize_weight(original[name], weight_args(variant))
    assert ours.dtype == torch.bfloat16 and torch.equal(ours, dense[name])


def test_units_keep_lists_and_ignore_patterns():
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(DEMO_MODEL)
    by_module = units_of(model, "module", ["lm_head"])
    assert len(by_module) == 4 * 4 and "lm_head" not in by_module   # q/k/v and gate/up go together, as vLLM fuses them
    assert by_module["model.layers.2.self_attn.qkv_proj"] == [f"model.layers.2.self_attn.{x}_proj" for x in "qkv"]
    assert by_module["model.layers.2.mlp.down_proj"] == ["model.layers.2.mlp.down_proj"]
    by_layer = units_of(model, "layer", ["lm_head", "re:.*down_proj$"])
    assert list(by_layer) == [f"model.layers.{i}" for i in range(4)]
    assert all(len(m) == 6 and not any(n.endswith("down_proj") for n in m) for m in by_layer.values())
    assert is_kept("model.layers.0.mlp.up_proj", ["re:.*layers\\.0\\..*"]) and not is_kept("lm_head", ["head"])
    result = {"units": [{"unit": f"u{i}", "modules": [f"m{i}a", f"m{i}b"]} for i in range(6)]}
    assert keep_top(result, 2) == ["m0a", "m0b", "m1a", "m1b"]
    assert keep_random(result, 3, seed=1) == keep_random(result, 3, seed=1) != keep_random(result, 3, seed=2)


def test_a_recipe_variant_needs_weights_to_rank_under():
    base = "name: r\nmodel: demo\ntasks: [demo_math]\nvariants:\n  - {name: b, baseline: true}\n"
    with pytest.raises(RecipeError, match="variants.1: sensitivity: needs a `scheme` or `weights`"):
        parse_recipe(base + "  - {name: x, recipe: r.yaml, sensitivity: {keep_top: 2}}\n")
    with pytest.raises(RecipeError, match="keep_top"):
        parse_recipe(base + "  - {name: x, scheme: W4A16, sensitivity: {keep_top: 0}}\n")


def test_ranking_on_the_demo_model_is_cached_reported_and_kept(tmp_path):
    recipe = parse_recipe("name: r\nmodel: demo\ntasks: [demo_math, {name: demo_code, limit: 4}]\n"
                          "variants:\n  - {name: b, baseline: true}\n"
                          "  - {name: w2, weights: {num_bits: 2, strategy: channel, group_size: null}, "
                          "sensitivity: {keep_top: 3, samples: 4, items_per_task: 3}}\n")
    variant, cache = recipe.variant("w2"), Cache(tmp_path / "cache")
    model_key = "demo-model"
    result = ranking(cache, Reporter(quiet=True), DEMO_MODEL, model_key, recipe, variant)
    units = result["units"]
    assert len(units) == 16 and [u["rank"] for u in units] == list(range(1, 17))
    assert all(a["kl"] >= b["kl"] > 0 for a, b in zip(units, units[1:]))
    assert set(units[0]["loss_delta"]) == {"demo_math", "demo_code"} and result["task_items"]["demo_math"] == 3
    assert ranking(cache, Reporter(quiet=True), DEMO_MODEL, model_key, recipe, variant) == result  # cached
    kept, chosen, bits = with_kept_modules(variant, result)
    assert kept.ignore == ["lm_head", *(m for u in units[:3] for m in u["modules"])] and kept.sensitivity is None
    assert chosen == units[:3] and 2 < bits < 16
    paths = write_report(result, tmp_path / "report", variant.sensitivity)
    md = paths[1].read_text()
    assert "| 1 ★ | " in md and "| 4 | " in md and paths[2].stat().st_size > 1000
    assert "`sensitivity: {keep_top: 3}`: 3 units" in md
    assert json.loads(paths[0].read_text())["variant"] == "w2"
    other = ranking(cache, Reporter(quiet=True), DEMO_MODEL, model_key, recipe, variant,
                    Sensitivity(keep_top=1, by="layer", samples=4, items_per_task=0))
    assert [u["unit"] for u in other["units"]][0].startswith("model.layers.") and len(other["units"]) == 4


def test_bits_budget_keeps_the_most_sensitive_units_that_fit():
    from quantize.sensitivity import mean_bits, within_budget

    # 2-bit units; keeping one adds 14 bits per weight of its size. 100 params in all, 200 bits quantized.
    rows = [{"unit": u, "modules": [u], "params": n, "bits": 2 * n} for u, n in
            (("big", 50), ("small-a", 10), ("small-b", 10), ("rest", 30))]
    result = {"units": rows}
    kept = within_budget(result, 2.0)
    assert kept == [] and mean_bits(result, kept) == 2.0
    kept = within_budget(result, 5.0)    # big (+7.0) does not fit; small-a (+1.4), small-b (+1.4) do
    assert [r["unit"] for r in kept] == ["small-a", "small-b"] and mean_bits(result, kept) == pytest.approx(4.8)
    kept = within_budget(result, 9.0)
    assert [r["unit"] for r in kept] == ["big"]    # the most sensitive first, then nothing else fits
    with pytest.raises(ValueError, match="below 2.000"):
        within_budget(result, 1.5)
    variant = Variant(name="v", weights=WeightSpec(num_bits=2, strategy="channel", group_size=None),
                      sensitivity=Sensitivity(max_bits_per_weight=5.0))
    kept_variant, units, bits = with_kept_modules(variant, result)
    assert kept_variant.ignore == ["lm_head", "small-a", "small-b"] and bits == pytest.approx(4.8)


def test_stored_bits_match_the_checkpoints_bits_per_weight():
    from compressed_tensors.quantization import QuantizationArgs

    from quantize.sensitivity import stored_bits

    group = QuantizationArgs(num_bits=4, strategy="group", group_size=128)       # manifest: 4.125
    assert stored_bits(group, (512, 256)) / (512 * 256) == 4.125
    asym = QuantizationArgs(num_bits=4, strategy="group", group_size=128, symmetric=False)   # manifest: 4.156
    assert round(stored_bits(asym, (512, 256)) / (512 * 256), 3) == 4.156
    channel = QuantizationArgs(num_bits=2, strategy="channel")
    assert stored_bits(channel, (768, 256)) == 768 * 256 * 2 + 768 * 16


def test_sensitivity_needs_one_rule():
    with pytest.raises(ValueError, match="exactly one of keep_top or max_bits_per_weight"):
        Sensitivity()
    with pytest.raises(ValueError, match="exactly one of keep_top or max_bits_per_weight"):
        Sensitivity(keep_top=2, max_bits_per_weight=4.5)
