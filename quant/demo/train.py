"""Train the demo model from scratch: a 4-layer Llama on the demo task generators, loss on targets only.

Reproducible from a fixed seed (up to floating-point nondeterminism of CPU kernels).
Usage: python -m quant.demo.train [--out DIR] [--steps N]
"""

from __future__ import annotations

import argparse
import copy
import math
import random
import time
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from evals.demo import GENERATORS
from evals.demo.build import train_items
from quant.demo import DEMO_MODEL_DIR
from quant.demo.skills import SKILLS
from quant.demo.tokenizer import train_tokenizer

MIX = {"demo_math": 0.35, "demo_code": 0.30, "demo_extraction": 0.15, "copy": 0.10, "recall": 0.10}
TRAIN_SEED = 1234


def model_config(vocab_size: int, heads: int = 8, tie: bool = True) -> LlamaConfig:
    # hidden/intermediate are multiples of 128 so every quantization kernel and group size applies.
    return LlamaConfig(vocab_size=vocab_size, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                       num_attention_heads=heads, num_key_value_heads=2, max_position_embeddings=512,
                       rope_theta=10000.0, tie_word_embeddings=tie, bos_token_id=0, eos_token_id=1,
                       pad_token_id=2, torch_dtype="bfloat16")


def training_pairs(n_total: int, seed: int) -> list[tuple[str, str]]:
    pairs = []
    rng = random.Random(seed + 1)
    for task, share in MIX.items():
        if task in SKILLS:
            pairs += [SKILLS[task](rng) for _ in range(int(n_total * share))]
            continue
        gen = GENERATORS[task]
        pairs += [(gen.prompt_of(d), gen.target_of(d)) for d in train_items(task, int(n_total * share), seed)]
    random.Random(seed).shuffle(pairs)
    return pairs


def skill_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed + 2)
    return [SKILLS[name](rng) for name in SKILLS for _ in range(n // len(SKILLS))]


def encode(tokenizer, pairs):
    out = []
    for prompt, target in pairs:
        p = tokenizer(prompt)["input_ids"]
        t = tokenizer(target, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        out.append((p, t))
    return out


def batches(encoded, batch_size: int, rng: random.Random, pad_id: int):
    """Length-bucketed batches (little padding); labels are -100 on prompt and padding."""
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i][0]) + len(encoded[i][1]))
    chunks = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    while True:
        rng.shuffle(chunks)
        for chunk in chunks:
            width = max(len(encoded[i][0]) + len(encoded[i][1]) for i in chunk)
            ids = torch.full((len(chunk), width), pad_id)
            labels = torch.full((len(chunk), width), -100)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for row, i in enumerate(chunk):
                p, t = encoded[i]
                seq = p + t
                ids[row, :len(seq)] = torch.tensor(seq)
                labels[row, len(p):len(seq)] = torch.tensor(t)
                mask[row, :len(seq)] = 1
            yield ids, labels, mask


def train(out: Path, steps: int, batch_size: int = 64, lr: float = 1e-3, seed: int = TRAIN_SEED,
          n_examples: int = 120_000, log_every: int = 50, save_every: int = 500, heads: int = 8,
          tie: bool = True, skill_steps: int = 300) -> None:
    torch.manual_seed(seed)
    t0 = time.time()
    pairs = training_pairs(n_examples, seed)
    tokenizer = train_tokenizer(p + t for p, t in pairs[:30_000])
    encoded = encode(tokenizer, pairs)
    print(f"data: {len(pairs)} examples, tokenizer {len(tokenizer)} tokens ({time.time() - t0:.0f}s)", flush=True)

    model = LlamaForCausalLM(model_config(len(tokenizer), heads, tie))
    print(f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    warmup = max(1, steps // 20)
    schedule = lambda s: min(1.0, (s + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
    data = batches(encoded, batch_size, random.Random(seed), tokenizer.pad_token_id)
    # A copying-only phase first (see quant/demo/skills.py for why and what it does not yet achieve).
    skills = batches(encode(tokenizer, skill_pairs(20_000, seed)), batch_size, random.Random(seed),
                     tokenizer.pad_token_id)
    model.train()
    tokens, t_start = 0, time.time()
    for step in range(1, steps + 1):
        ids, labels, mask = next(skills if step <= skill_steps else data)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        tokens += int(mask.sum())
        if step % log_every == 0:
            rate = tokens / (time.time() - t_start)
            print(f"step {step}/{steps} loss {loss.item():.4f} lr {sched.get_last_lr()[0]:.2e} {rate:.0f} tok/s",
                  flush=True)
        if step % save_every == 0 or step == steps:
            save(model, tokenizer, out)
    print(f"done in {(time.time() - t0) / 60:.1f} min", flush=True)


def save(model, tokenizer, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=DEMO_MODEL_DIR)
    ap.add_argument("--steps", type=int, default=2400)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--untied", dest="tie", action="store_false", help="separate lm_head (default: tied)")
    ap.add_argument("--skill-steps", type=int, default=300, help="copying-only warm-up steps")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--save-every", type=int, default=500)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    train(args.out, args.steps, args.batch_size, lr=args.lr, heads=args.heads, tie=args.tie,
          save_every=args.save_every, skill_steps=args.skill_steps)


if __name__ == "__main__":
    main()
