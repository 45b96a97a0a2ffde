"""The demo model with outlier channels: the same function, with the activation outliers real LLMs carry.

Trained LLMs have a few hidden channels whose activations are tens of times larger than the others' (the
outlier features of LLM.int8(), the "massive activations" of Sun et al.); int8 activations with one scale per
tensor and round-to-nearest 4-bit weights lose accuracy on them, and SmoothQuant, GPTQ and AWQ win part of it
back. The 3.5M-parameter demo model has no such channels, so every scheme vLLM serves leaves it unharmed.

This transform gives it some without retraining and without changing what it computes: for a few hidden
channels c, the RMSNorm weights in front of attention and the MLP (input_layernorm, post_attention_layernorm)
are multiplied by SCALE at c, and column c of every Linear reading that norm's output (q/k/v_proj, gate/up_proj)
is divided by SCALE. SCALE is a power of two, so both products are exact in bfloat16: the model's outputs are
those of the original up to the order of floating-point sums.

Which channels and how much, from the model's own statistics (`activation_stats`): the two hidden channels with
the largest mean |residual| over the demo's calibration text (41 and 114; the same two dominate the norm outputs
of layers 1-3, as outlier channels in real LLMs sit in the same few dimensions in every layer), scaled by 32,
which puts their largest activation at about 50 times the median channel's (before: under 2 times), within the
20-100 times reported for real models' outlier channels.

Usage: quant demo build-outliers [--out DIR]      (reads demo/model, writes demo/model-outliers)
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from demo import DEMO_MODEL_DIR, DEMO_OUTLIERS_DIR

CHANNELS = (41, 114)
SCALE = 32.0
STATS_TEXTS = 64


@torch.no_grad()
def add_outlier_channels(model, channels=CHANNELS, scale: float = SCALE) -> None:
    """Scale the given hidden channels by `scale` after every pre-attention and pre-MLP norm, and divide the
    matching input columns of the Linears that read them: the model computes the same function."""
    idx = torch.tensor(channels)
    for layer in model.model.layers:
        pairs = ((layer.input_layernorm, (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj)),
                 (layer.post_attention_layernorm, (layer.mlp.gate_proj, layer.mlp.up_proj)))
        for norm, readers in pairs:
            norm.weight[idx] *= scale
            for linear in readers:
                linear.weight[:, idx] /= scale


@torch.no_grad()
def activation_stats(model, tokenizer, texts: list[str]) -> dict[str, dict]:
    """Per Linear input (attention and MLP of each layer): the largest |activation| over the median one, and
    the largest channel's max over the median channel's max; plus the channels of largest mean |residual|."""
    seen: dict[str, list[torch.Tensor]] = {}

    def keep(name):
        def hook(_module, inputs):
            seen.setdefault(name, []).append(inputs[0].detach().float().reshape(-1, inputs[0].shape[-1]).abs())
        return hook

    handles = []
    for i, layer in enumerate(model.model.layers):
        handles.append(layer.self_attn.q_proj.register_forward_pre_hook(keep(f"layer{i}.attention_input")))
        handles.append(layer.mlp.gate_proj.register_forward_pre_hook(keep(f"layer{i}.mlp_input")))
    residual = torch.zeros(model.config.hidden_size)
    tokens = 0
    try:
        for text in texts:
            out = model(**tokenizer(text, return_tensors="pt"), output_hidden_states=True)
            hidden = torch.stack(out.hidden_states[1:-1]).float().abs()
            residual += hidden.sum((0, 1, 2))
            tokens += hidden.shape[0] * hidden.shape[2]
    finally:
        for h in handles:
            h.remove()
    stats = {}
    for name, chunks in seen.items():
        x = torch.cat(chunks)
        channel_max = x.max(0).values
        stats[name] = {"max_over_median": float(x.max() / x.median()),
                       "top_channel_over_median_channel": float(channel_max.max() / channel_max.median()),
                       "top_channel": int(channel_max.argmax())}
    stats["residual_top_channels"] = [int(c) for c in (residual / tokens).topk(4).indices]
    return stats


def build_outlier_model(source: Path = DEMO_MODEL_DIR, out: Path = DEMO_OUTLIERS_DIR) -> dict[str, dict]:
    """Write the demo model with outlier channels to `out`; the activation statistics before and after."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from demo.calibration import calibration_texts

    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.bfloat16)
    tokenizer = AutoTokenizer.from_pretrained(source)
    texts = calibration_texts(STATS_TEXTS, seed=0)
    before = activation_stats(model, tokenizer, texts)
    add_outlier_channels(model)
    after = activation_stats(model, tokenizer, texts)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    if (source / "generation_config.json").exists():
        shutil.copy(source / "generation_config.json", out / "generation_config.json")
    return {"before": before, "after": after}


def stats_lines(stats: dict[str, dict]) -> list[str]:
    lines = ["Linear input              max/median |x|      top channel's max / median channel's max",
             "                          before   after      before   after"]
    for name in stats["before"]:
        if name == "residual_top_channels":
            continue
        b, a = stats["before"][name], stats["after"][name]
        lines.append(f"{name:<24}  {b['max_over_median']:>6.1f}  {a['max_over_median']:>6.1f}      "
                     f"{b['top_channel_over_median_channel']:>6.1f}  {a['top_channel_over_median_channel']:>6.1f}"
                     f"  (channel {a['top_channel']})")
    lines.append(f"channels of largest mean |residual| (before): {stats['before']['residual_top_channels']}; "
                 f"scaled: {list(CHANNELS)} by {SCALE:g}")
    return lines
