"""The KL stage of a sweep: the baseline scores its own answers (reference top-k), every other variant scores
the same answers, and the mean KL per task goes next to its accuracy. Both halves are cached by content."""

from __future__ import annotations

import json

from rich.markup import escape

from core.hashing import digest
from core.recipe import Variant
from evals.kl import TOP_K, item_kl, item_top1_agreement, reference_pairs
from quant.context import KlReference, Session, SweepContext
from quant.eval_stage import STAGE_EVAL

STAGE_REFERENCE, STAGE_KL = "kl-reference", "kl"
KL_VERSION = 2   # what a cached KL entry holds (2: top-1 agreement beside the KL); a bump re-scores, never reuses


def _reference_key(ctx: SweepContext, eval_key: str) -> str:
    return digest("kl-reference", eval_key, ctx.recipe.kl_items, TOP_K)


def _kl_key(eval_key: str, reference_key: str) -> str:
    return digest("kl", eval_key, reference_key, f"v{KL_VERSION}")


class KlStage:
    """One variant's half of the KL stage, on the answers of its eval stage (`eval_keys`: task -> cache key)."""
    name = "kl"

    def __init__(self, ctx: SweepContext, variant: Variant, eval_keys: dict[str, str]):
        self.ctx, self.variant, self.eval_keys = ctx, variant, eval_keys
        self.todo = self._todo()
        self.not_measurable: dict[str, str] = {}   # task -> why this variant's KL cannot be measured

    def _todo(self) -> list[str]:
        """Tasks whose half for this variant is not cached yet (and can be done)."""
        ctx, keys = self.ctx, self.eval_keys
        if not ctx.recipe.kl_items:
            return []
        if self.variant.baseline:
            return [t for t, key in keys.items() if not ctx.cache.has(STAGE_REFERENCE, _reference_key(ctx, key))]
        return [t for t, key in keys.items()
                if t in ctx.kl_reference and not ctx.cache.has(STAGE_KL, _kl_key(key, ctx.kl_reference[t].key))]

    def pending(self) -> bool:
        return bool(self.todo)

    def run(self, session: Session) -> None:
        """The uncached halves, with `session.lm` (anything with topk_logprobs) on this variant; the variant's
        answers come from its eval stage, which has run by now."""
        from evals.backends.served import NotMeasurable
        from evals.stats import mean_ci   # numpy and scipy: a cached stage never imports them

        for task in self.todo:
            if self.variant.baseline and not self.ctx.cache.has(STAGE_EVAL, self.eval_keys[task]):
                self.ctx.kl_unmeasurable[task] = "the baseline's task is not measurable on its engine"
                continue   # no answers to score
            try:
                self._run_one(session, task, mean_ci)
            except NotMeasurable as exc:
                self.not_measurable[task] = str(exc)
                if self.variant.baseline:
                    self.ctx.kl_unmeasurable[task] = f"the baseline's {exc}"
                self.ctx.reporter.log(f"  KL {task}: not measurable on this engine ({escape(str(exc))})", style="yellow")

    def _run_one(self, session: Session, task: str, mean_ci) -> None:
        ctx = self.ctx
        eval_key = self.eval_keys[task]
        if self.variant.baseline:
            pairs = reference_pairs(self._samples(eval_key), ctx.recipe.kl_items)
            ctx.cache.save_json(STAGE_REFERENCE, _reference_key(ctx, eval_key),
                                {"pairs": pairs, "topk": self._topk(session.lm, f"KL reference {task}", pairs)})
            return
        reference = ctx.kl_reference[task]
        topk = self._topk(session.lm, f"KL {task}", reference.pairs)
        items = [{"doc_id": d, "kl": kl, "top1": item_top1_agreement(b, c)}
                 for (d, _, _), b, c in zip(reference.pairs, reference.topk, topk)
                 if (kl := item_kl(b, c)) is not None]
        summary = mean_ci([i["kl"] for i in items]) if items else None
        top1 = mean_ci([i["top1"] for i in items]) if items else None
        ctx.cache.save_json(STAGE_KL, _kl_key(eval_key, reference.key),
                            {"summary": summary, "top1_agreement": top1, "items": items})

    def collect(self, record: dict) -> None:
        """The baseline keeps its reference in the context; the others get accuracy[task]["kl"]."""
        ctx = self.ctx
        if not ctx.recipe.kl_items:
            return
        unmeasurable = dict(self.not_measurable)
        if not self.variant.baseline:
            unmeasurable |= {t: why for t, why in ctx.kl_unmeasurable.items() if t in self.eval_keys}
        if unmeasurable:
            record.setdefault("not_measurable", {}).setdefault("kl", {}).update(unmeasurable)
        for task, eval_key in self.eval_keys.items():
            if self.variant.baseline:
                key = _reference_key(ctx, eval_key)
                if ctx.cache.has(STAGE_REFERENCE, key):
                    reference = ctx.cache.load_json(STAGE_REFERENCE, key)
                    if reference["pairs"]:
                        ctx.kl_reference[task] = KlReference(key, reference["pairs"], reference["topk"])
            elif task in ctx.kl_reference:
                key = _kl_key(eval_key, ctx.kl_reference[task].key)
                if ctx.cache.has(STAGE_KL, key) and task in record["accuracy"]:
                    cached = ctx.cache.load_json(STAGE_KL, key)
                    if cached["summary"]:
                        record["accuracy"][task]["kl"] = {**cached["summary"], "top_k": TOP_K,
                                                          "top1_agreement": cached["top1_agreement"]}

    def _samples(self, eval_key: str) -> list[dict]:
        path = self.ctx.cache.path(STAGE_EVAL, eval_key) / "samples.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()]

    def _topk(self, lm, label: str, pairs: list) -> list:
        with self.ctx.reporter.bar(f"  {label}", total=len(pairs)) as advance:
            if hasattr(lm, "progress"):
                lm.progress = advance
            return lm.topk_logprobs([(prompt, answer) for _, prompt, answer in pairs], TOP_K) if pairs else []
