"""The KL stage of a sweep: the baseline scores its own answers (reference top-k), every other variant scores
the same answers, and the mean KL per task goes next to its accuracy. Both halves are cached by content."""

from __future__ import annotations

import json

from evals.kl import TOP_K, item_kl, reference_pairs
from evals.stats import mean_ci
from core.hashing import digest

STAGE_EVAL, STAGE_REFERENCE, STAGE_KL = "evals", "kl-reference", "kl"


def _samples(ctx, eval_key: str) -> list[dict]:
    path = ctx.cache.path(STAGE_EVAL, eval_key) / "samples.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _reference_key(ctx, eval_key: str) -> str:
    return digest("kl-reference", eval_key, ctx.recipe.kl_items, TOP_K)


def _kl_key(eval_key: str, reference_key: str) -> str:
    return digest("kl", eval_key, reference_key)


def todo(ctx, variant, eval_keys: dict[str, str]) -> list[str]:
    """Task keys whose KL half for this variant is not cached yet (and can be done)."""
    if not ctx.recipe.kl_items:
        return []
    if variant.baseline:
        return [t for t, key in eval_keys.items() if not ctx.cache.has(STAGE_REFERENCE, _reference_key(ctx, key))]
    return [t for t, key in eval_keys.items()
            if t in ctx.kl_reference and not ctx.cache.has(STAGE_KL, _kl_key(key, ctx.kl_reference[t]["key"]))]


def _topk(ctx, lm, label: str, pairs: list) -> list:
    with ctx.reporter.bar(f"  {label}", total=len(pairs)) as advance:
        if hasattr(lm, "progress"):
            lm.progress = advance
        return lm.topk_logprobs([(prompt, answer) for _, prompt, answer in pairs], TOP_K) if pairs else []


def run(ctx, variant, lm, task_keys: list[str], eval_keys: dict[str, str]) -> None:
    """The uncached halves, with `lm` (anything with topk_logprobs) on this variant."""
    for task in task_keys:
        if variant.baseline:
            pairs = reference_pairs(_samples(ctx, eval_keys[task]), ctx.recipe.kl_items)
            ctx.cache.save_json(STAGE_REFERENCE, _reference_key(ctx, eval_keys[task]),
                                {"pairs": pairs, "topk": _topk(ctx, lm, f"KL reference {task}", pairs)})
            continue
        reference = ctx.kl_reference[task]
        topk = _topk(ctx, lm, f"KL {task}", reference["pairs"])
        per_item = [item_kl(b, c) for b, c in zip(reference["topk"], topk)]
        items = [{"doc_id": d, "kl": v} for (d, _, _), v in zip(reference["pairs"], per_item) if v is not None]
        summary = mean_ci([i["kl"] for i in items]) if items else None
        ctx.cache.save_json(STAGE_KL, _kl_key(eval_keys[task], reference["key"]), {"summary": summary, "items": items})


def collect(ctx, variant, eval_keys: dict[str, str], record: dict) -> None:
    """Into the record: the baseline keeps its reference in memory; the others get accuracy[task]["kl"]."""
    if not ctx.recipe.kl_items:
        return
    for task, eval_key in eval_keys.items():
        if variant.baseline:
            key = _reference_key(ctx, eval_key)
            if ctx.cache.has(STAGE_REFERENCE, key):
                reference = ctx.cache.load_json(STAGE_REFERENCE, key)
                if reference["pairs"]:
                    ctx.kl_reference[task] = {"key": key, **reference}
        elif task in ctx.kl_reference:
            key = _kl_key(eval_key, ctx.kl_reference[task]["key"])
            if ctx.cache.has(STAGE_KL, key) and task in record["accuracy"]:
                summary = ctx.cache.load_json(STAGE_KL, key)["summary"]
                if summary:
                    record["accuracy"][task]["kl"] = {**summary, "top_k": TOP_K}
