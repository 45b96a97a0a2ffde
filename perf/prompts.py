"""Synthetic prompts of exact token counts under the served model's tokenizer.

Prompts are token-id lists sent as they are (vLLM adds no BOS to them), so the server counts exactly the
requested number: the tokenizer's own special prefix/suffix (e.g. BOS), the rest uniform random
non-special vocabulary ids, optionally starting with a prefix shared by many requests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


class PromptMaker:
    def __init__(self, tokenizer_path: str | Path):
        from transformers import AutoTokenizer   # heavy import; only needed here

        tok = self.tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_path))
        self.prefix, self.suffix = _special_wrapping(tok)
        excluded = set(tok.all_special_ids) | set(getattr(tok, "added_tokens_decoder", {}) or {})
        limit = len(tok)
        config = Path(tokenizer_path) / "config.json"
        if config.is_file():   # a tokenizer may list ids the model has no embedding for
            limit = min(limit, json.loads(config.read_text()).get("vocab_size") or limit)
        self.allowed = np.array([i for i in range(limit) if i not in excluded], dtype=np.int64)

    def text(self, ids: list[int]) -> str:
        """The prompt as text, for a server that takes no token ids (its own tokenizer may count a few more or
        fewer tokens: the perf stage's warnings then say so)."""
        return self.tokenizer.decode(ids)

    def shared(self, tokens: int, rng: np.random.Generator) -> list[int]:
        return rng.choice(self.allowed, size=tokens).tolist()

    def make(self, length: int, rng: np.random.Generator, shared: list[int] | None = None) -> list[int]:
        body_len = length - len(self.prefix) - len(self.suffix)
        if body_len < 0:
            return (self.prefix + self.suffix)[:length]
        head = (shared or [])[:body_len]
        body = head + rng.choice(self.allowed, size=body_len - len(head)).tolist()
        return self.prefix + body + self.suffix


def _special_wrapping(tok) -> tuple[list[int], list[int]]:
    """The ids the tokenizer puts before and after a text when it adds special tokens."""
    probe = "hello world 123"
    plain = tok(probe, add_special_tokens=False)["input_ids"]
    full = tok(probe)["input_ids"]
    for i in range(len(full) - len(plain) + 1):
        if full[i:i + len(plain)] == plain:
            return full[:i], full[i + len(plain):]
    return [], []
