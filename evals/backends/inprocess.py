"""Accuracy without an engine: the checkpoint in transformers (compressed-tensors decompresses on load)."""

from __future__ import annotations

from pathlib import Path


def inprocess_lm(model_dir: str | Path, batch_size: int = 32):
    import torch
    from lm_eval.models.huggingface import HFLM
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
    model.eval()
    return HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, device="cpu")
