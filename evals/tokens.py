"""Token-level helpers shared by every scorer (served, in-process, sensitivity); no lm-eval import.

They encode as lm-eval's `hf` backend does (lm_eval.models.huggingface.HFLM, lm_eval.api.model), so that a
log-likelihood scored through the engine is the one `lm_eval --model hf` computes on the same text:
- text is encoded with the tokenizer's own special tokens, except when it already starts with the prefix
  token's text;
- the prefix token is the tokenizer's BOS, else its EOS; a rolling log-likelihood scores every token of the
  text after that prefix (the first token included); an empty context is the prefix alone, before the
  continuation encoded without special tokens;
- trailing whitespace of a context moves to the continuation before the two are split.
"""

from __future__ import annotations

# Bumped whenever what a scorer sends for the same text changes: part of every eval's cache key.
SCORING_VERSION = 2


def prefix_token_id(tokenizer) -> int:
    return tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id


def encoder(tokenizer):
    """text -> token ids, as lm-eval's HFLM.tok_encode for a causal model."""
    prefix_text = tokenizer.decode([prefix_token_id(tokenizer)])

    def encode(text: str, special: bool = True) -> list[int]:
        starts_with_prefix = bool(prefix_text) and text.startswith(prefix_text)
        return tokenizer.encode(text, add_special_tokens=special and not starts_with_prefix)
    return encode


def split_ids(encode, context: str, continuation: str, prefix_id: int | None = None) -> tuple[list[int], list[int]]:
    """Token ids of context and continuation, split where encoding the whole text puts the boundary.
    An empty context is the prefix token (`prefix_id`) unless the continuation (encoded without special
    tokens; `encode(text, special=False)`) starts with it."""
    if not context:
        cont = encode(continuation, special=False)
        if prefix_id is None or (cont and cont[0] == prefix_id):
            return cont[:1], cont[1:]
        return [prefix_id], cont
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces:
        context, continuation = context[:-n_spaces], context[-n_spaces:] + continuation
    whole, ctx = encode(context + continuation), encode(context)
    n_ctx = min(len(ctx), len(whole) - 1)
    return whole[:n_ctx], whole[n_ctx:]


def rolling_ids(encode, prefix_id: int, text: str) -> list[int]:
    """The ids a rolling log-likelihood scores: the prefix token, then the text; every id after the first is
    scored (a text must fit the context: one window)."""
    return [prefix_id] + encode(text)
