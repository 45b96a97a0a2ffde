"""Token-level helpers shared by every scorer (served, in-process, sensitivity); no lm-eval import."""

from __future__ import annotations


def split_ids(encode, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """Token ids of context and continuation, split where encoding the whole text puts the boundary."""
    whole, ctx = encode(context + continuation), encode(context)
    n_ctx = min(len(ctx), len(whole) - 1)
    return whole[:n_ctx], whole[n_ctx:]
