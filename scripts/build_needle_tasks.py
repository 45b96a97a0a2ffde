"""Builds the needle-in-a-haystack tasks' items (evals/tasks/niah_<N>/test.jsonl) from the shipped prose
(evals/haystack/opticks_queries.txt), deterministically from a seed:
    python scripts/build_needle_tasks.py TOKENIZER_DIR [--items 50] [--seed 0]
TOKENIZER_DIR: the tokenizer the lengths are counted in (the shipped files: SmolLM2-135M-Instruct's, the
folder `quant sweep recipes/smollm2.yaml` dequantizes to under ~/.cache/quant-suite/models/gguf/).

Per length N, `--items` items: a window of whole sentences starting at an offset spread over the prose, as
long as the whole prompt (preamble, window, needle, question) stays within N - 16 tokens (16 for the answer);
the needle at one of five depths (0, 25, 50, 75, 100% of the window, at the nearest sentence start), depths
taken in turn; a key made of two words and a 7-digit number, both drawn from the seed."""

from __future__ import annotations

import argparse
import json
import random
import sys
from bisect import bisect_left
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from evals.needle import ANSWER_TOKENS, DEPTHS, LENGTHS, haystack, prompt_of, sentence_starts  # noqa: E402

MAX_CHARS_PER_TOKEN = 12   # a window never needs more text than this per token (English BPE: about 4)
MIN_FILL = 0.9   # a window's prompt is at least this share of its length (long paragraphs end windows early)
ADJECTIVES = ("silver", "quiet", "amber", "crimson", "hollow", "gentle", "frozen", "golden", "hidden", "bitter",
              "rapid", "ancient", "narrow", "bright", "distant", "humble", "lucky", "misty", "proud", "velvet")
NOUNS = ("harbor", "falcon", "lantern", "meadow", "compass", "orchard", "violin", "glacier", "pepper", "castle",
         "ribbon", "anchor", "thistle", "canyon", "marble", "sparrow", "engine", "saddle", "beacon", "walnut")


def build(tokenizer, length: int, items: int, seed: int, text: str) -> list[dict]:
    """The items of one length: each prompt at most `length - ANSWER_TOKENS` tokens."""
    rng = random.Random(f"{seed}-{length}")
    starts = sentence_starts(text)
    count = lambda doc: len(tokenizer(prompt_of(doc, text), add_special_tokens=False)["input_ids"])
    rows = []
    for i in range(items):
        key = f"{rng.choice(ADJECTIVES)}-{rng.choice(NOUNS)}"
        value, depth = rng.randrange(1_000_000, 10_000_000), DEPTHS[i % len(DEPTHS)]
        first = bisect_left(starts, int(i * (len(text) - 12 * length) / items))
        for start in starts[first:]:   # the first start whose window fills at least MIN_FILL of the length
            fields = {"length": length, "key": key, "value": value, "depth": depth}
            doc = window(count, starts, length - ANSWER_TOKENS, start, fields)
            if doc["tokens"] >= MIN_FILL * (length - ANSWER_TOKENS):
                break
        rows.append(doc)
    return rows


def window(count, starts: list[int], length: int, start: int, doc: dict) -> dict:
    doc = {**doc, "start": start, "end": start, "needle_at": 0}
    ends = [s for s in starts if start < s <= start + MAX_CHARS_PER_TOKEN * length] or [starts[-1]]
    lo, hi = 0, len(ends) - 1    # the most sentences whose prompt stays within `length` tokens
    while lo < hi:
        mid = (lo + hi + 1) // 2
        doc["end"] = ends[mid]
        lo, hi = (mid, hi) if count(doc) <= length else (lo, mid - 1)
    doc["end"] = ends[lo]
    window_starts = [s - start for s in starts if start <= s < doc["end"]] + [doc["end"] - start]
    target = doc["depth"] * (doc["end"] - start)
    doc["needle_at"] = min(window_starts, key=lambda s: abs(s - target))
    while count(doc) > length and doc["end"] > start:   # the needle's tokens: drop sentences from the end
        doc["end"] = max(s for s in starts if s < doc["end"])
        doc["needle_at"] = min(doc["needle_at"], doc["end"] - start)
    doc["tokens"] = count(doc)
    return doc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tokenizer")
    parser.add_argument("--items", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    args = parser.parse_args()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    text = haystack()
    for length in args.lengths:
        rows = build(tokenizer, length, args.items, args.seed, text)
        out = REPO / "evals" / "tasks" / f"niah_{length}" / "test.jsonl"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join(json.dumps(r) + "\n" for r in rows))
        tokens = [r["tokens"] for r in rows]
        print(f"{out.relative_to(REPO)}: {len(rows)} items, {min(tokens)}-{max(tokens)} tokens")


if __name__ == "__main__":
    main()
