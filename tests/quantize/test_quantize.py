"""The quantize stage: variant -> modifiers, calibration texts, and one real RTN run on a probe-shaped model."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from core.recipe import Calibration, Variant, WeightSpec
from quantize import schemes
from quantize.backends import BACKENDS, get_backend
from quantize.backends import llmcompressor as lc
from tests.helpers import REPO


# --- variant -> modifiers (no oneshot) ---------------------------------------------------------------

def _types(variant: Variant) -> list[str]:
    return [type(m).__name__ for m in lc.build_modifiers(variant)]


@pytest.mark.parametrize("variant, expected", [
    (Variant(name="a", scheme="W4A16", algorithm="gptq"), ["GPTQModifier"]),
    (Variant(name="a", scheme="W4A16"), ["QuantizationModifier"]),
    (Variant(name="a", scheme="W4A16_ASYM", algorithm="awq"), ["AWQModifier", "QuantizationModifier"]),
    (Variant(name="a", scheme="W8A8", algorithm="gptq", smoothquant=0.8), ["SmoothQuantModifier", "GPTQModifier"]),
    (Variant(name="a", scheme="FP8_DYNAMIC"), ["QuantizationModifier"]),
    (Variant(name="a", scheme="W8A16", algorithm="gptq"), ["GPTQModifier"]),
    (Variant(name="a", weights=WeightSpec(num_bits=2)), ["QuantizationModifier"]),
    (Variant(name="a", groups=[{"targets": ["re:.*self_attn.*"], "scheme": "W8A8"}], algorithm="gptq"),
     ["GPTQModifier"]),
])
def test_modifier_types(variant, expected):
    assert _types(variant) == expected


def test_modifier_arguments():
    ignore = ["lm_head", "re:.*layers\\.0\\..*", "re:.*down_proj$"]
    (gptq,) = lc.build_modifiers(Variant(name="a", scheme="w4a16", algorithm="gptq", ignore=ignore))
    assert gptq.scheme == "W4A16" and gptq.ignore == ignore and gptq.targets == ["Linear"]
    (no_order,) = lc.build_modifiers(Variant(name="a", scheme="W4A16", algorithm="gptq", actorder=False))  # YAML off
    assert no_order.actorder is None and "actorder" not in gptq.model_dump(exclude_unset=True)
    smooth, _ = lc.build_modifiers(Variant(name="a", scheme="W8A8", algorithm="gptq", smoothquant=0.8))
    assert smooth.smoothing_strength == 0.8
    (rtn2,) = lc.build_modifiers(Variant(name="a", weights=WeightSpec(num_bits=2, group_size=64)))
    weights = rtn2.config_groups["group_0"].weights
    assert (weights.num_bits, weights.group_size, weights.symmetric, weights.strategy) == (2, 64, True, "group")
    assert rtn2.scheme is None


ATTN, MLP = "re:.*self_attn\\..*", "re:.*mlp\\..*"


def test_a_scheme_per_module_group():
    variant = Variant(name="a", groups=[{"targets": [ATTN], "scheme": "W8A8"},
                                        {"targets": [MLP], "weights": {"num_bits": 4, "group_size": 64}}])
    (modifier,) = lc.build_modifiers(variant)
    attn, mlp = modifier.config_groups["group_0"], modifier.config_groups["group_1"]
    assert attn.targets == [ATTN] and attn.weights.num_bits == 8 and attn.input_activations.dynamic is True
    assert mlp.targets == [MLP] and (mlp.weights.num_bits, mlp.weights.group_size) == (4, 64)
    assert mlp.input_activations is None and modifier.ignore == ["lm_head"]
    assert not lc.needs_calibration(variant)
    static = Variant(name="b", groups=[{"targets": [ATTN], "scheme": "FP8"}, {"targets": [MLP], "scheme": "W4A16"}])
    assert lc.needs_calibration(static)


def test_groups_are_checked_against_the_model_before_quantizing():
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(REPO / "demo/model")

    def check(groups, ignore=("lm_head",)):
        lc.check_assignment(model, Variant(name="a", groups=groups, ignore=list(ignore)))

    check([{"targets": [ATTN], "scheme": "W8A8"}, {"targets": [MLP], "scheme": "W4A16"}])
    with pytest.raises(ValueError, match="matches the targets of both group_0 and group_1"):
        check([{"targets": ["re:.*proj$"], "scheme": "W8A8"}, {"targets": [MLP], "scheme": "W4A16"}])
    with pytest.raises(ValueError, match="qkv_proj: vLLM fuses q_proj/k_proj/v_proj into one layer"):
        check([{"targets": ["re:.*q_proj$"], "scheme": "W8A8"}, {"targets": [MLP], "scheme": "W4A16"}])
    with pytest.raises(ValueError, match="no Linear module matches"):
        check([{"targets": ["re:.*nothing$"], "scheme": "W8A8"}])
    with pytest.raises(ValueError, match="gate_up_proj: .* got gate_proj 16-bit, up_proj quantized"):
        lc.check_assignment(model, Variant(name="a", scheme="W4A16", ignore=["lm_head", "re:.*gate_proj$"]))


def test_groups_in_a_recipe():
    from core.recipe import RecipeError, parse_recipe
    base = "name: r\nmodel: demo\ntasks: [demo_math]\nvariants:\n  - {name: b, baseline: true}\n"
    mixed = parse_recipe(base + "  - name: m\n    groups:\n      - {targets: ['re:.*self_attn.*'], scheme: W8A8}\n"
                                "      - {targets: ['re:.*mlp.*'], scheme: W4A16}\n").variant("m")
    assert mixed.quantized and [g.scheme for g in mixed.groups] == ["W8A8", "W4A16"]
    for bad, message in (
            ("{name: m, groups: [{targets: [x], scheme: W8A8, weights: {num_bits: 4}}]}", "exactly one of scheme or weights"),
            ("{name: m, groups: [{targets: [], scheme: W8A8}]}", "variants.1.groups.0.targets"),
            ("{name: m, scheme: W4A16, groups: [{targets: [x], scheme: W8A8}]}", "give only one of scheme, groups"),
            ("{name: m, backend: gptqmodel, algorithm: gptq, groups: [{targets: [x], scheme: W4A16}]}",
             "backend gptqmodel takes no smoothquant, groups")):
        with pytest.raises(RecipeError, match=message):
            parse_recipe(base + f"  - {bad}\n")
    awq = Variant(name="m", algorithm="awq", groups=[{"targets": ["x"], "scheme": "W8A8"}])
    assert schemes.problems(awq) == [(("groups", 0, "scheme"), "algorithm awq needs a weight-only scheme (W4A16, "
                                      "W4A16_ASYM, W8A16, ... or `weights`), not W8A8, which quantizes activations too")]


def test_mixed_checkpoint(probe_model, tmp_path):
    from quantize import quantize_variant

    variant = Variant(name="mixed", groups=[{"targets": [ATTN], "scheme": "W8A8"}, {"targets": [MLP], "scheme": "W4A16"}])
    manifest = quantize_variant(probe_model, variant, Calibration(), tmp_path / "mixed")
    qconfig = json.loads((tmp_path / "mixed" / "config.json").read_text())["quantization_config"]
    assert qconfig["format"] == "mixed-precision"
    assert {g["format"] for g in qconfig["config_groups"].values()} == {"int-quantized", "pack-quantized"}
    assert "int8 sym channel" in manifest["scheme_description"] and "int4 sym group 128" in manifest["scheme_description"]
    assert 4.125 < manifest["bits_per_weight_quantized"] < 8.06
    assert [g["scheme"] for g in manifest["groups"]] == ["W8A8", "W4A16"] and manifest["scheme"] is None


def test_modifier_errors():
    with pytest.raises(ValueError, match="unknown scheme"):
        lc.build_modifiers(Variant(name="a", scheme="W9A9"))
    with pytest.raises(ValueError, match="pick one"):
        lc.build_modifiers(Variant(name="a", scheme="W4A16", algorithm="awq", smoothquant=0.5))
    with pytest.raises(ValueError, match="group_size"):
        lc.weight_args(WeightSpec(num_bits=4, group_size=None))


@pytest.mark.parametrize("variant, needed", [
    (Variant(name="a", scheme="W4A16"), False),
    (Variant(name="a", scheme="FP8_DYNAMIC"), False),
    (Variant(name="a", scheme="W8A8"), False),                 # per-token dynamic activations
    (Variant(name="a", scheme="FP8"), True),                   # static per-tensor input scales
    (Variant(name="a", scheme="W4A16", algorithm="gptq"), True),
    (Variant(name="a", scheme="W4A16_ASYM", algorithm="awq"), True),
    (Variant(name="a", scheme="W8A8", smoothquant=0.8), True),
    (Variant(name="a", weights=WeightSpec(num_bits=2)), False),
    (Variant(name="a", recipe="s:\n  m:\n    QuantizationModifier: {scheme: W4A16}\n"), True),
])
def test_needs_calibration(variant, needed):
    assert lc.needs_calibration(variant) is needed


def test_recipe_inline_and_file(tmp_path):
    inline = "quant_stage:\n  quant_modifiers:\n    QuantizationModifier: {targets: [Linear], scheme: W4A16}\n"
    assert lc.recipe_text(Variant(name="a", recipe=inline)) == inline
    path = tmp_path / "r.yaml"
    path.write_text(inline)
    assert lc.recipe_text(Variant(name="a", recipe=str(path))) == inline
    for missing in (tmp_path / "missing.yaml", tmp_path / "missing"):
        with pytest.raises(FileNotFoundError):
            lc.recipe_text(Variant(name="a", recipe=str(missing)))


def test_registry():
    assert "llmcompressor" in BACKENDS and get_backend() is lc
    with pytest.raises(ValueError):
        get_backend("nope")


def test_awq_pin_memory_patch_is_scoped():
    import torch
    from llmcompressor.pipelines.cache import IntermediatesCache

    original = IntermediatesCache.pin_memory
    with lc._cpu_safe_pin_memory():
        if not torch.cuda.is_available():
            assert IntermediatesCache.pin_memory is not original
    assert IntermediatesCache.pin_memory is original


# --- one real quantization ---------------------------------------------------------------------------

def test_rtn_w4a16_checkpoint(probe_model, tmp_path, monkeypatch):
    import torch
    from transformers import AutoModelForCausalLM

    from quantize import CPU_THREADS, MANIFEST_NAME, quantize_variant

    out = tmp_path / "w4a16"
    out.mkdir()
    (out / "stale.txt").write_text("replaced atomically")
    threads_seen, real_quantize = [], lc.quantize
    monkeypatch.setattr(lc, "quantize", lambda *args: (threads_seen.append(torch.get_num_threads()),
                                                       real_quantize(*args))[1])
    torch.set_num_threads(2)
    manifest = quantize_variant(probe_model, Variant(name="w4a16-rtn", scheme="W4A16"), Calibration(), out)

    # on a CPU, torch quantizes on one thread (the checkpoint's bytes then do not depend on the core count), and
    # the caller's thread count is given back
    assert threads_seen == [CPU_THREADS] == [manifest["cpu_threads"]] and torch.get_num_threads() == 2

    assert json.loads((out / MANIFEST_NAME).read_text()) == manifest
    assert not (out / "stale.txt").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary dirs left behind
    for key in ("variant", "scheme_description", "algorithm", "ignore", "ignore_expanded", "versions",
                "size_bytes", "bits_per_weight_quantized", "quantization_seconds", "calibration"):
        assert key in manifest
    assert manifest["algorithm"] == "rtn" and manifest["calibration"] is None
    assert len(manifest["recipe_sha256"]) == 64 and manifest["recipe"] == [
        {"QuantizationModifier": {"targets": ["Linear"], "scheme": "W4A16", "ignore": ["lm_head"]}}]
    assert manifest["ignore_expanded"] == ["lm_head"]
    assert manifest["format"] == "pack-quantized"
    assert manifest["bits_per_weight_quantized"] == pytest.approx(4.125)  # int4 + a bf16 scale per 128
    assert set(manifest["versions"]) == {"torch", "llmcompressor", "compressed-tensors", "transformers"}
    assert manifest["size_bytes"] > manifest["weights_bytes"] > 0
    assert (out / "tokenizer.json").is_file()

    model = AutoModelForCausalLM.from_pretrained(out)
    with torch.no_grad():
        logits = model(torch.tensor([[0, 5, 6, 7]])).logits
    assert logits.shape == (1, 4, 1024) and torch.isfinite(logits).all()


def test_cli_reports_one_error_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "quantize", "--model", str(tmp_path), "--out", str(tmp_path / "out"),
         "--variant-json", '{"name": "x", "scheme": "W4A16"}'],
        capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("QUANTIZE-ERROR: ") and "config.json" in last
    assert not (tmp_path / "out").exists()


def test_cli_rejects_bad_variant(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "quantize", "--model", str(tmp_path), "--out", str(tmp_path / "out"),
         "--variant-json", '{"name": "x", "scheme": "W8A8", "algorithm": "awq"}'],
        capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1].startswith("QUANTIZE-ERROR: ValueError: --variant-json")


def test_two_bit_packed_and_dense(probe_model, tmp_path):
    """2-bit packs (pack-quantized, 16 codes per int32); the dense export holds exactly the same values."""
    import torch
    from transformers import AutoModelForCausalLM

    from quantize import quantize_variant

    variant = Variant(name="w2", weights=WeightSpec(num_bits=2, group_size=128))
    packed = quantize_variant(probe_model, variant, Calibration(), tmp_path / "packed")
    dense = quantize_variant(probe_model, variant, Calibration(), tmp_path / "dense", dense=True)
    assert packed["format"] == "pack-quantized" and not packed["fake_quantized"]
    assert packed["bits_per_weight_quantized"] == pytest.approx(2.125)
    assert dense["fake_quantized"] and dense["packed_format"] == "pack-quantized"
    assert dense["packed_size_bytes"] == packed["size_bytes"] < dense["size_bytes"]
    assert "quantization_config" not in json.loads((tmp_path / "dense" / "config.json").read_text())

    ids = torch.tensor([[0, 9, 8, 7, 6]])
    with torch.no_grad():
        a = AutoModelForCausalLM.from_pretrained(tmp_path / "packed")(ids).logits
        b = AutoModelForCausalLM.from_pretrained(tmp_path / "dense")(ids).logits
    assert torch.isfinite(a).all() and torch.equal(a, b)


def test_dense_needs_weight_only(tmp_path):
    from quantize.dense import check_weight_only

    group = {"targets": ["Linear"], "weights": {"num_bits": 8}, "input_activations": {"num_bits": 8}}
    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": {"config_groups": {"g": group}}}))
    with pytest.raises(ValueError, match="weight-only"):
        check_weight_only(tmp_path)


def test_quantize_in_subprocess(probe_model, tmp_path):
    from quantize import QuantizeError, quantize_in_subprocess

    log = tmp_path / "q.log"
    manifest = quantize_in_subprocess(probe_model, Variant(name="fp8", scheme="FP8_DYNAMIC"), Calibration(),
                                      tmp_path / "fp8", log_path=log, timeout=300)
    assert manifest["format"] == "float-quantized"
    # fp8 codes + one bf16 scale per output channel (of 256 inputs, or 768 for down_proj)
    assert 8 + 16 / 768 < manifest["bits_per_weight_quantized"] < 8 + 16 / 256
    with pytest.raises(QuantizeError, match="config.json"):
        quantize_in_subprocess(tmp_path / "nope", Variant(name="x", scheme="W4A16"), Calibration(),
                               tmp_path / "x", log_path=log)
