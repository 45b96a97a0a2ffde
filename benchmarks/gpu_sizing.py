"""The sizing table of docs/gpu.md: disk and time per variant of the two GPU recipes, ESTIMATED (nothing here runs a
model). Disk is computed from the models' published dimensions and each scheme's bytes per weight; time from the
recipe's items, generation limits and perf workloads at the throughputs assumed below (one H100-class GPU, vLLM),
and the in-process CPU estimate as the sweep prints it (quant/inprocess_plan.py).

Usage: python benchmarks/gpu_sizing.py [--cores 16]
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from core.recipe import load_recipe
from perf.requests import requests_per_level
from quant.inprocess_plan import CPU_FLOPS_PER_CORE, PROMPT_TOKENS, task_gen_tokens, task_items


@dataclass(frozen=True)
class Model:
    recipe: str
    hidden: int
    intermediate: int
    layers: int
    kv_dim: int
    vocab: int
    tied: bool
    # ASSUMED throughputs on one H100-class GPU in bf16 (not measured here): output tokens/s at high concurrency,
    # prompt tokens/s, seconds per output token at concurrency 1, engine start-up, GPTQ/AWQ time per variant.
    decode_tok_s: float
    prefill_tok_s: float
    c1_s_per_tok: float
    start_s: float
    calibrated_quantize_s: float

    def linear(self) -> tuple[int, int]:
        """(every decoder Linear's weights, the down_proj's among them)."""
        attn = self.hidden * (2 * self.hidden + 2 * self.kv_dim)
        down = self.intermediate * self.hidden
        return self.layers * (attn + 3 * down), self.layers * down

    def embeddings(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied else 2)


QWEN_1_5B = Model("recipes/codegen.yaml", 1536, 8960, 28, 256, 151936, True, 20000, 200000, 0.005, 90, 300)
LLAMA_8B = Model("recipes/instruct-8b.yaml", 4096, 14336, 32, 1024, 128256, False, 5000, 40000, 0.012, 150, 1200)
# Bytes per Linear weight: int8/fp8 with a scale per output channel; int4 with a bf16 scale per group of 128
# (and a zero point for the asymmetric scheme). Embeddings, lm_head (ignored) and norms stay bf16.
BYTES = {None: 2.0, "FP8_DYNAMIC": 1.0, "W8A8": 1.0, "W4A16": 0.5 + 2 / 128, "W4A16_ASYM": 0.5 + 2.5 / 128}


def checkpoint_bytes(model: Model, variant) -> float:
    linear, down = model.linear()
    per_weight = BYTES[variant.scheme]
    kept = down if any("down_proj" in pattern for pattern in variant.ignore or []) else 0
    return (linear - kept) * per_weight + kept * 2.0 + model.embeddings() * 2.0


def eval_seconds(model: Model, recipe) -> tuple[float, int, int]:
    """Every task's items: prompts at the prefill rate, generated tokens (each item's max_gen_toks: an upper
    bound) at the decode rate."""
    items = sum(task_items(t) for t in recipe.tasks)
    generated = sum(task_items(t) * task_gen_tokens(t) for t in recipe.tasks)
    return items * PROMPT_TOKENS / model.prefill_tok_s + generated / model.decode_tok_s, items, generated


def perf_seconds(model: Model, recipe) -> float:
    total = 0.0
    for w in recipe.perf.workloads:
        for kind, level in w.levels():
            n = requests_per_level(w, kind, level) + w.warmup_requests
            if level == 1:   # latency-bound: one request at a time
                total += n * (w.prompt_tokens / model.prefill_tok_s + w.output_tokens * model.c1_s_per_tok)
            else:
                total += n * (w.prompt_tokens / model.prefill_tok_s + w.output_tokens / model.decode_tok_s)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", type=int, default=16, help="CPU cores for the in-process estimate")
    args = parser.parse_args()
    print("| model | variant | checkpoint GB | quantize min | engine start min | evals min | perf min | "
          f"variant total min | in-process on {args.cores} CPU cores h |")
    print("|---|---|---|---|---|---|---|---|---|")
    for model in (QWEN_1_5B, LLAMA_8B):
        recipe = load_recipe(model.recipe)
        linear, _ = model.linear()
        params = linear + model.embeddings()
        evals, items, generated = eval_seconds(model, recipe)
        perf = perf_seconds(model, recipe)
        tokens = items * PROMPT_TOKENS + generated
        cpu_h = 2 * params * tokens / (CPU_FLOPS_PER_CORE * args.cores) / 3600
        for variant in recipe.variants:
            size = checkpoint_bytes(model, variant)
            quantize = 0 if not variant.quantized else (
                model.calibrated_quantize_s if variant.algorithm in ("gptq", "awq") else 2 * size / 1e9)
            total = quantize + model.start_s + evals + perf
            print(f"| {recipe.model} ({params / 1e9:.2f}B) | {variant.name} | {size / 1e9:.1f} | {quantize / 60:.1f} | "
                  f"{model.start_s / 60:.1f} | {evals / 60:.0f} | {perf / 60:.0f} | {total / 60:.0f} | {cpu_h:.0f} |")
        print(f"<!-- {recipe.name}: {items} items, {generated:,} generated tokens at most per variant -->")


if __name__ == "__main__":
    main()
