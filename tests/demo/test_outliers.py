"""The demo model with outlier channels: the same function as the demo model, outliers where they were put,
and the shipped checkpoint is what `quant demo build-outliers` makes of demo/model."""

from __future__ import annotations

import copy

import pytest
import torch

from demo import DEMO_MODEL_DIR, DEMO_OUTLIERS_DIR
from demo.calibration import calibration_texts
from demo.outliers import CHANNELS, SCALE, STATS_TEXTS, activation_stats, add_outlier_channels


@pytest.fixture(scope="module")
def demo_model():
    from transformers import AutoModelForCausalLM, AutoTokenizer
    return (AutoModelForCausalLM.from_pretrained(DEMO_MODEL_DIR, dtype=torch.float32),
            AutoTokenizer.from_pretrained(DEMO_MODEL_DIR))


TEXTS = ["Order note: ship 3 boxes to Porto by Friday.", "Q: 47 + 38 = ?\nA:", "def add(a, b):\n    return"]


def test_the_transform_keeps_what_the_model_computes(demo_model):
    model, tokenizer = demo_model
    changed = copy.deepcopy(model)
    add_outlier_channels(changed)
    with torch.no_grad():
        for text in TEXTS:
            ids = tokenizer(text, return_tensors="pt")
            torch.testing.assert_close(changed(**ids).logits, model(**ids).logits, rtol=1e-4, atol=1e-4)


@pytest.mark.slow   # 128 forward passes with hooks
def test_the_scaled_channels_become_outliers_in_every_layers_linear_inputs(demo_model):
    model, tokenizer = demo_model
    texts = calibration_texts(STATS_TEXTS, seed=0)   # what the build reads the statistics from
    before = activation_stats(model, tokenizer, texts)
    changed = copy.deepcopy(model)
    add_outlier_channels(changed)
    after = activation_stats(changed, tokenizer, texts)
    for name, stats in after.items():
        if name == "residual_top_channels":
            continue
        assert before[name]["top_channel_over_median_channel"] < 3, name
        assert stats["top_channel_over_median_channel"] > 20 and stats["top_channel"] in CHANNELS, name
    assert set(CHANNELS) <= set(before["residual_top_channels"][:2])   # chosen from the model's own statistics


def test_the_shipped_checkpoint_is_the_transform_of_the_demo_model():
    """SCALE is a power of two: in bfloat16 the products are exact, so the shipped weights match bit for bit."""
    from safetensors.torch import load_file
    assert SCALE == 2 ** round(torch.log2(torch.tensor(SCALE)).item())
    original = load_file(DEMO_MODEL_DIR / "model.safetensors")
    shipped = load_file(DEMO_OUTLIERS_DIR / "model.safetensors")
    assert original.keys() == shipped.keys()
    idx = torch.tensor(CHANNELS)
    for name, weight in original.items():
        expected = weight.clone()
        if name.endswith(("input_layernorm.weight", "post_attention_layernorm.weight")):
            expected[idx] *= SCALE
        elif name.endswith(tuple(f"{p}.weight" for p in ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"))):
            expected[:, idx] /= SCALE
        assert torch.equal(shipped[name], expected), name
