"""Accuracy without an engine: the checkpoint in transformers (compressed-tensors decompresses on load)."""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from lm_eval.models import huggingface
from lm_eval.models.huggingface import HFLM
from tqdm import tqdm

from evals.kl import TOP_K
from evals.tokens import encoder, prefix_token_id, split_ids

_progress: ContextVar = ContextVar("inprocess_progress", default=None)


class _CountingTqdm(tqdm):
    """HFLM's own request bar (drawn or not): each request done also advances our progress callback."""

    def update(self, n=1):
        if (progress := _progress.get()) is not None:
            progress(n)
        return super().update(n)


huggingface.tqdm = _CountingTqdm


@contextmanager
def _reporting(progress):
    token = _progress.set(progress)
    try:
        yield
    finally:
        _progress.reset(token)


class InprocessLM(HFLM):
    progress = None   # callable(n_done), as ServedLM's: advanced per request done

    def generate_until(self, requests, disable_tqdm: bool = False):
        with _reporting(self.progress):
            return super().generate_until(requests, disable_tqdm)

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        with _reporting(self.progress):
            return super().loglikelihood(requests, disable_tqdm)

    def _model_call(self, inps, attn_mask=None, labels=None):
        """Logits in float32: lm-eval takes log_softmax in the model's dtype, and bf16's 8 bits of mantissa
        round a log-likelihood summed over a few hundred tokens to whole nats (ties between choices). The
        engine computes logprobs in float32 too."""
        return super()._model_call(inps, attn_mask, labels).float()

    def topk_logprobs(self, pairs: list[tuple[str, str]], k: int = TOP_K) -> list[list[dict[str, float]]]:
        """Per (context, continuation): the top-k next-token logprobs at each continuation token, keyed by
        token text as the served backend keys them."""
        import torch

        out = []
        for context, continuation in pairs:
            ctx, cont = split_ids(encoder(self.tokenizer), context, continuation, prefix_token_id(self.tokenizer))
            with torch.no_grad():
                logits = self.model(torch.tensor([ctx + cont], device=self.model.device)).logits[0, len(ctx) - 1:-1].float()
            values, ids = torch.log_softmax(logits, dim=-1).topk(k, dim=-1)
            out.append([{self.tokenizer.decode([i]): v for i, v in zip(row_ids.tolist(), row_vals.tolist())}
                        for row_vals, row_ids in zip(values, ids)])
        return out


def inprocess_lm(model_dir: str | Path, batch_size: int = 32, dtype: str = "bfloat16",
                 device: str = "cpu") -> InprocessLM:
    """The checkpoint in transformers on `device` (cpu, cuda, cuda:N), in `dtype`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).to(device)
    model.eval()
    return InprocessLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, device=device)
