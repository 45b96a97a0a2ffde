"""Sensitivity analysis: quantize one unit at a time (one Linear module, or every Linear of one decoder
layer), leave the rest in 16-bit, and measure the damage against the unquantized model:

- KL divergence of next-token distributions on calibration text (over the baseline's top-20 tokens plus one
  bucket for the rest, as evals/kl.py; the candidate's probabilities are exact here), and
- the change in loss (mean NLL of the gold answer given the prompt) on the recipe's task data.

Weights are rounded to nearest with the variant's own quantization args and compressed-tensors' own
qparams and fake-quantize functions, i.e. as llmcompressor's RTN path does; GPTQ/AWQ recover part of the
damage, so the ranking is of sensitivity to rounding, which is what decides what to keep in 16-bit.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evals.kl import MIN_MASS, TOP_K
from quantize.assignment import FUSED, fused_layer


def weight_args(variant):
    """The variant's weight QuantizationArgs (preset scheme or custom `weights`)."""
    from compressed_tensors.quantization import QuantizationArgs, preset_name_to_scheme

    from quantize.schemes import weight_args as custom_args
    if variant.weights is not None:
        return QuantizationArgs(**custom_args(variant.weights))
    if variant.scheme is not None:
        weights = preset_name_to_scheme(variant.scheme.upper(), ["Linear"]).weights
        if weights is not None:
            return weights
    raise ValueError(f"variant {variant.name}: sensitivity analysis needs a `scheme` or `weights` with "
                     "quantized weights")


def fake_quantize_weight(weight, args):
    """Round-to-nearest of a 2-D weight with min-max qparams, dequantized. Computed in the weight's own
    dtype, as llmcompressor does: values on a rounding boundary land differently in float32."""
    import torch
    from compressed_tensors.quantization.lifecycle.forward import fake_quantize
    from compressed_tensors.quantization.utils import calculate_qparams

    w = weight
    if args.strategy == "group":
        if w.shape[1] % args.group_size:
            raise ValueError(f"input size {w.shape[1]} is not a multiple of group size {args.group_size}")
        grouped = w.reshape(w.shape[0], -1, args.group_size)
        lo, hi = grouped.amin(-1), grouped.amax(-1)
    elif args.strategy == "channel":
        lo, hi = w.amin(-1, keepdim=True), w.amax(-1, keepdim=True)
    elif args.strategy == "tensor":
        lo, hi = w.amin().reshape(1), w.amax().reshape(1)
    else:
        raise ValueError(f"weight strategy {args.strategy!r} is not supported by the sensitivity analysis")
    zero = torch.zeros_like(lo)
    scale, zero_point = calculate_qparams(torch.minimum(lo, zero), torch.maximum(hi, zero), args)
    return fake_quantize(w, scale, zero_point, args).to(weight.dtype)


def stored_bits(args, shape) -> int:
    """Bits a weight of `shape` takes quantized: its codes plus 16-bit scales, and zero points at the code
    width where asymmetric (compressed-tensors' packed layout)."""
    rows, cols = shape
    per_scale = 16 + (0 if args.symmetric else args.num_bits)
    scales = {"group": rows * cols // (args.group_size or cols), "channel": rows}.get(args.strategy, 1)
    return rows * cols * args.num_bits + scales * per_scale


def linear_modules(model) -> list[str]:
    import torch
    return [name for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)]


def is_kept(name: str, ignore: list[str]) -> bool:
    """Whether llmcompressor's `ignore` entries (module names, or "re:" regexes) leave a module in 16-bit."""
    return any(re.match(p[3:], name) if p.startswith("re:") else name == p or name.endswith("." + p)
               for p in ignore)


def _fused_unit(name: str, names: set[str]) -> str:
    """vLLM runs q/k/v and gate/up as one fused Linear that needs one scheme: they are one unit."""
    layer = fused_layer(name)
    if layer is None:
        return name
    parent, _, fused = layer.rpartition(".")
    return layer if all(f"{parent}.{shard}" in names for shard in FUSED[fused]) else name


def units_of(model, by: str, ignore: list[str] = ()) -> dict[str, list[str]]:
    """unit name -> module names, among the Linears the variant quantizes (not its `ignore`d ones).
    by="module": every Linear alone, except those vLLM fuses (q/k/v, gate/up), which go together;
    by="layer": every decoder layer's Linears together."""
    return units_by_name(linear_modules(model), by, ignore)


def units_by_name(linears: list[str], by: str, ignore: list[str] = ()) -> dict[str, list[str]]:
    """units_of, from the Linears' names alone."""
    names = [n for n in linears if not is_kept(n, list(ignore))]
    units: dict[str, list[str]] = {}
    if by == "module":
        for name in names:
            units.setdefault(_fused_unit(name, set(names)), []).append(name)
        return units
    for name in names:
        parts = name.split(".")
        index = next((i for i, p in enumerate(parts[:-1]) if p == "layers" and parts[i + 1].isdigit()), None)
        key = ".".join(parts[:index + 2]) if index is not None else name
        units.setdefault(key, []).append(name)
    return units


def rule_problems(spec, linears: dict[str, tuple[int, int]], ignore: list[str], weights: dict,
                  keep_unfit: bool = False) -> list[str]:
    """What keeps a sensitivity rule from being met on this model, before any unit is scored: `keep_top` of
    at least the units there are (every Linear would stay 16-bit), or a `max_bits_per_weight` outside the
    bits per weight the scheme reaches (weights: its num_bits, symmetric, strategy, group_size), from every
    unit quantized up to, not including, every unit kept (16). keep_unfit (`unfit_groups: keep`): Linears
    whose in_features the group size does not divide stay 16-bit and are not ranked, as in the analysis."""
    from types import SimpleNamespace

    size = weights.get("group_size") if weights.get("strategy") in ("group", "tensor_group") else None
    if keep_unfit and size:
        ignore = [*ignore, *(n for n, (_, columns) in linears.items() if columns >= size and columns % size)]
    units = units_by_name(list(linears), spec.by, ignore)
    if not units:
        return []   # nothing to rank: the variant's own checks say why
    if spec.keep_top is not None:
        if spec.keep_top < len(units):
            return []
        return [f"keep_top {spec.keep_top} keeps every unit: the variant ranks {len(units)} units (by {spec.by}), "
                f"so keep_top must be 1 to {len(units) - 1}"]
    args = SimpleNamespace(**weights)
    names = [n for members in units.values() for n in members]
    params = sum(linears[n][0] * linears[n][1] for n in names)
    lowest = sum(stored_bits(args, linears[n]) for n in names) / params
    if lowest <= spec.max_bits_per_weight < 16:
        return []
    return [f"max_bits_per_weight {spec.max_bits_per_weight:g} is outside what the scheme reaches on this model: "
            f"from {lowest:.3f} bits per weight (all {len(units)} units by {spec.by} quantized) up to, not "
            f"including, 16 (every unit kept)"]


def task_items(tasks, n: int) -> dict[str, list[tuple[str, str]]]:
    """Per task: (prompt, gold answer) for the first n items, as lm-eval builds them."""
    from evals.registry import lm_eval_spec, task_manager

    items: dict[str, list[tuple[str, str]]] = {}
    for task in tasks:
        loaded = task_manager(task.name).load([lm_eval_spec(task)])["tasks"][task.name]
        delimiter = loaded.config.target_delimiter or ""
        pairs = []
        for doc in list(loaded.eval_docs)[:n]:
            target = loaded.doc_to_target(doc)
            if isinstance(target, int) and loaded.config.doc_to_choice is not None:
                target = loaded.doc_to_choice(doc)[target]
            if isinstance(target, list):
                target = target[0]
            pairs.append((loaded.doc_to_text(doc), delimiter + str(target)))
        items[task.key] = pairs
    return items


class _Scorer:
    """Holds the tokenized calibration text, the task pairs and the baseline's answers to both."""

    def __init__(self, model, tokenizer, texts: list[str], items: dict[str, list[tuple[str, str]]],
                 max_length: int, device: str):
        import torch

        from evals.tokens import encoder, split_ids
        self.model, self.device, self.torch = model, device, torch
        self.batches = [tokenizer(t, return_tensors="pt", truncation=True, max_length=max_length)["input_ids"]
                        for t in texts]
        self.items, encode = {}, encoder(tokenizer)
        for task, pairs in items.items():
            encoded = []
            for prompt, answer in pairs:
                ctx, cont = split_ids(encode, prompt, answer)
                whole = ctx + cont
                dropped = max(0, len(whole) - max_length)   # long items lose their start, never their answer
                if len(ctx) - dropped >= 1:
                    encoded.append((torch.tensor([whole[dropped:]]), len(ctx) - dropped))
            self.items[task] = encoded
        self.reference = [self._topk(ids) for ids in self.batches]
        self.base_loss = self.losses()

    def _logprobs(self, ids):
        with self.torch.no_grad():
            return self.torch.log_softmax(self.model(ids.to(self.device)).logits[0].float(), dim=-1)

    def _topk(self, ids):
        values, indices = self._logprobs(ids).topk(TOP_K, dim=-1)
        return values, indices

    def kl(self) -> float:
        total, count = 0.0, 0
        for ids, (p_lp, top) in zip(self.batches, self.reference):
            q_lp = self._logprobs(ids).gather(-1, top)
            p, q = p_lp.exp(), q_lp.exp()
            p_rest = (1 - p.sum(-1)).clamp_min(MIN_MASS)
            q_rest = (1 - q.sum(-1)).clamp_min(MIN_MASS)
            per_token = (p * (p_lp - q_lp)).sum(-1) + p_rest * (p_rest.log() - q_rest.log())
            total += float(per_token.clamp_min(0).sum())
            count += per_token.numel()
        return total / max(count, 1)

    def losses(self) -> dict[str, float]:
        out = {}
        for task, encoded in self.items.items():
            nll = []
            for ids, n_ctx in encoded:
                lp = self._logprobs(ids)
                targets = ids[0, n_ctx:].to(lp.device)
                nll.append(float(-lp[n_ctx - 1:-1].gather(-1, targets[:, None]).mean()))
            out[task] = sum(nll) / len(nll) if nll else math.nan
        return out


def analyse(model_dir: Path, variant, texts: list[str], items: dict[str, list[tuple[str, str]]],
            by: str = "module", max_length: int = 256, device: str = "cpu",
            progress: Callable[[int, int, str], None] | None = None) -> dict[str, Any]:
    """Score every unit; -> {"units": [...ranked by KL, most sensitive first], "baseline_loss", ...}."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    args = weight_args(variant)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).to(device).eval()
    scorer = _Scorer(model, tokenizer, texts, items, max_length, device)
    modules = dict(model.named_modules())
    rows = []
    units = units_of(model, by, variant.ignore)
    for done, (unit, names) in enumerate(units.items()):
        if progress:
            progress(done, len(units), unit)
        originals = {n: modules[n].weight.data.clone() for n in names}
        try:
            for n in names:
                modules[n].weight.data = fake_quantize_weight(originals[n], args)
            kl, losses = scorer.kl(), scorer.losses()
        finally:
            for n in names:
                modules[n].weight.data = originals[n]
        rows.append({"unit": unit, "modules": names, "params": sum(originals[n].numel() for n in names),
                     "bits": sum(stored_bits(args, originals[n].shape) for n in names), "kl": kl,
                     "loss_delta": {t: losses[t] - scorer.base_loss[t] for t in losses}})
    if progress:
        progress(len(units), len(units), "")
    rows.sort(key=lambda r: -r["kl"])
    for rank, row in enumerate(rows, 1):
        row["rank"] = rank
    return {"variant": variant.name, "weights": args.model_dump(mode="json", exclude_none=True), "by": by,
            "top_k": TOP_K, "calibration_texts": len(texts), "task_items": {t: len(p) for t, p in items.items()},
            "baseline_loss": scorer.base_loss, "units": rows}


def mean_bits(ranking: dict[str, Any], kept: list[dict]) -> float:
    """Mean bits per weight over the ranked units with `kept` ones in 16-bit and the rest quantized."""
    rows = ranking["units"]
    bits = sum(r["bits"] for r in rows) + sum(16 * r["params"] - r["bits"] for r in kept)
    return bits / sum(r["params"] for r in rows)


def within_budget(ranking: dict[str, Any], max_bits: float) -> list[dict]:
    """Most sensitive first, the units that fit in a mean of `max_bits` bits per weight (kept units at 16
    bits); one that does not fit is passed over for smaller ones."""
    rows = ranking["units"]
    budget = max_bits * sum(r["params"] for r in rows)
    bits = sum(r["bits"] for r in rows)
    if bits > budget:
        raise ValueError(f"max_bits_per_weight {max_bits:g} is below {mean_bits(ranking, []):.3f}, the bits per "
                         "weight with every unit quantized")
    kept = []
    for row in rows:
        extra = 16 * row["params"] - row["bits"]
        if bits + extra <= budget:
            bits += extra
            kept.append(row)
    return kept


def keep_top(ranking: dict[str, Any], k: int) -> list[str]:
    """Modules of the k most sensitive units: what to keep in 16-bit."""
    return [m for row in ranking["units"][:k] for m in row["modules"]]


def keep_random(ranking: dict[str, Any], k: int, seed: int) -> list[str]:
    """Modules of k units drawn at random (the control for keep_top)."""
    rows = random.Random(seed).sample(ranking["units"], k)
    return [m for row in rows for m in row["modules"]]
