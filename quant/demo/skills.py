"""Training-only warm-up items that teach a tiny model to copy from its prompt.

Without them the demo model learned the answer formats but not to copy values, even after 1,500 steps.
Plain copying ("Repeat: ... Again: ...") is meant to form induction heads, and associative recall
("k is v, ...; k?") the content-addressed lookup that extraction, math (reusing the previous line's
result) and code (constants from the docstring) need. Measured: copies of distinct single-token words are
learned in ~150 steps, but these items (numbers as digit tokens, two-word values) only start to be
learned around step 300, so the warm-up does not yet do its job.
"""

from __future__ import annotations

import random

from evals.demo.extraction_gen import CITIES, FIRST, LAST, THINGS
from evals.demo.math_gen import ITEMS, NAMES

WORDS = FIRST + LAST + CITIES + THINGS + ITEMS + NAMES


def _value(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.4:
        return str(rng.randint(0, 99999))
    if kind < 0.7:
        return rng.choice(WORDS)
    return f"{rng.choice(WORDS)} {rng.choice(WORDS)}"


def copy_item(rng: random.Random) -> tuple[str, str]:
    seq = " ".join(_value(rng) for _ in range(rng.randint(2, 6)))
    return f"Repeat: {seq}\nAgain:", f" {seq}"


def recall_item(rng: random.Random) -> tuple[str, str]:
    keys = rng.sample(WORDS, rng.randint(2, 6))
    values = [_value(rng) for _ in keys]
    facts = ", ".join(f"{k} is {v}" for k, v in zip(keys, values))
    j = rng.randrange(len(keys))
    return f"Facts: {facts}.\nQuestion: {keys[j]}?\nAnswer:", f" {values[j]}"


SKILLS = {"copy": copy_item, "recall": recall_item}
