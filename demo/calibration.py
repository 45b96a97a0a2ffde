"""The calibration source "demo": texts from the demo task generators (the recipe's `calibration.source: demo`)."""

from __future__ import annotations

import random

from demo.tasks import GENERATORS
from demo.tasks.build import eval_items


def calibration_texts(n: int, seed: int) -> list[str]:
    """n prompt+answer texts drawn round-robin from the demo tasks, none of them a test item."""
    tasks = sorted(GENERATORS)
    # Calibrating on the very items we score would flatter the quantized model: skip test prompts.
    banned = {GENERATORS[t].prompt_of(d) for t in tasks for d in eval_items(t)}
    rng = random.Random(seed)
    texts: list[str] = []
    drawn = 0
    while len(texts) < n:
        task = tasks[drawn % len(tasks)]  # round-robin: an even mix of the three tasks
        gen = GENERATORS[task]
        doc = gen.make_item(rng, task_id=f"calib/{drawn}") if task == "demo_code" else gen.make_item(rng)
        drawn += 1
        prompt = gen.prompt_of(doc)
        if prompt not in banned:
            texts.append(prompt + gen.target_of(doc))
    return texts
