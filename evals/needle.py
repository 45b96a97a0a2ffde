"""Long-context retrieval in the spirit of RULER's needle-in-a-haystack: a key's number ("One of the special
magic numbers for silver-harbor is: 4830271.") planted at a known depth in real prose, then asked for after the
prose. The prose is the Queries of Newton's Opticks (public domain, evals/haystack/README.md). One task per
context length (niah_256 ... niah_2048): each item keeps where its window of prose starts and ends and where the
needle goes, so the prompt is rebuilt from the shipped text without a tokenizer; scripts/build_needle_tasks.py
sized each window with SmolLM2's tokenizer so that the prompt and ANSWER_TOKENS fit that many tokens (a
server with max_model_len 2048 takes niah_2048).

Scored by exact match of the first number the model writes with the planted one: a guess is right with
probability 1e-7 (7 digits), so chance is 0."""

from __future__ import annotations

import re
from pathlib import Path

HAYSTACK = Path(__file__).resolve().parent / "haystack" / "opticks_queries.txt"
LENGTHS = (256, 512, 1024, 2048)
ANSWER_TOKENS = 16   # what an item may generate; its prompt takes the rest of its length
DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)

PREAMBLE = ("Some special magic numbers are hidden within the following text. Make sure to memorize it. I will "
            "quiz you about the numbers afterwards.\n")
NEEDLE = "One of the special magic numbers for {key} is: {value}."
QUESTION = ("\nWhat is the special magic number for {key} mentioned in the provided text? The special magic number "
            "for {key} mentioned in the provided text is")
_NUMBER = re.compile(r"\d+")


def haystack() -> str:
    return HAYSTACK.read_text(encoding="utf-8")


def sentence_starts(text: str) -> list[int]:
    """Offsets where a sentence, a clause after a semicolon, or a paragraph begins: windows start and end there,
    and the needle goes there."""
    return [0] + [m.end() for m in re.finditer(r"(?<=[.?!;:])\s+|\n\n", text)]


def context_of(doc: dict, text: str | None = None) -> str:
    """The item's prose window with the needle planted at its offset."""
    text = haystack() if text is None else text
    window = text[doc["start"]:doc["end"]]
    at = doc["needle_at"]
    needle = NEEDLE.format(key=doc["key"], value=doc["value"])
    before, after = window[:at].rstrip(), window[at:].lstrip()
    return " ".join(part for part in (before, needle, after) if part)


def prompt_of(doc: dict, text: str | None = None) -> str:
    return PREAMBLE + context_of(doc, text) + QUESTION.format(key=doc["key"])


def answer_of(response: str) -> str | None:
    found = _NUMBER.search(response)
    return found.group(0) if found else None


def score(doc: dict, response: str) -> float:
    return float(answer_of(response) == str(doc["value"]))


def process_results(doc: dict, results: list[str]) -> dict:
    """lm-eval's hook for every niah task: the first generation's exact match."""
    return {"exact_match": score(doc, results[0])}
