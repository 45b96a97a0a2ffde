"""Accuracy without an engine: the checkpoint in transformers (compressed-tensors decompresses on load)."""

from __future__ import annotations

from pathlib import Path

from lm_eval.models.huggingface import HFLM

from evals.tokens import split_ids


class InprocessLM(HFLM):
    def topk_logprobs(self, pairs: list[tuple[str, str]], k: int = 20) -> list[list[dict[str, float]]]:
        """Per (context, continuation): the top-k next-token logprobs at each continuation token, keyed by
        token text as the served backend keys them."""
        import torch

        out = []
        for context, continuation in pairs:
            ctx, cont = split_ids(lambda text: self.tokenizer(text)["input_ids"], context, continuation)
            with torch.no_grad():
                logits = self.model(torch.tensor([ctx + cont])).logits[0, len(ctx) - 1:-1].float()
            values, ids = torch.log_softmax(logits, dim=-1).topk(k, dim=-1)
            out.append([{self.tokenizer.decode([i]): v for i, v in zip(row_ids.tolist(), row_vals.tolist())}
                        for row_vals, row_ids in zip(values, ids)])
        return out


def inprocess_lm(model_dir: str | Path, batch_size: int = 32) -> InprocessLM:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
    model.eval()
    return InprocessLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, device="cpu")
