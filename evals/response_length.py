"""How long a variant's generated answers are, in the model's tokens: MLPerf requires a quantized model's
output length to stay within 90% of the reference's (a model that answers shorter is not as good)."""

from __future__ import annotations

import logging
from functools import lru_cache
from pathlib import Path

from evals.stats import mean_ci

log = logging.getLogger(__name__)


def generated_answers(samples: list[dict]) -> list[str]:
    """The raw generated answer of every generation item (a multiple-choice item generates none)."""
    answers = [(s.get("resps") or [[None]])[0] for s in samples]
    return [text for a in answers if isinstance(a, list) for text in a if isinstance(text, str)]


@lru_cache(maxsize=4)
def _tokenizer(model_dir: str):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(model_dir)


def response_tokens(samples: list[dict], model_dir: Path | str) -> dict | None:
    """Mean tokens per generated answer with its 95% interval (evals.stats.mean_ci), counted with the tokenizer
    in model_dir (every variant of a run shares it); None for a task that generates nothing."""
    answers = generated_answers(samples)
    if not answers:
        return None
    try:
        tokenizer = _tokenizer(str(model_dir))
    except (OSError, ValueError) as exc:   # a report column, not a reason to fail a variant
        log.warning("output lengths not counted: no tokenizer in %s (%s)", model_dir, exc)
        return None
    return mean_ci([float(len(tokenizer.encode(a, add_special_tokens=False))) for a in answers])


def reasoning_tokens(samples: list[dict], model_dir: Path | str) -> dict | None:
    """Mean reasoning-trace tokens per item (over its samples) with its 95% interval; each item's mean is kept
    in its record (metrics.reasoning_tokens, what the gate pairs) beside every sample's count (None: a task
    whose answers carry no trace)."""
    if not any("reasoning" in s for s in samples):
        return None
    try:
        tokenizer = _tokenizer(str(model_dir))
    except (OSError, ValueError) as exc:
        log.warning("reasoning lengths not counted: no tokenizer in %s (%s)", model_dir, exc)
        return None
    means = []
    for record in samples:
        counts = [len(tokenizer.encode(t, add_special_tokens=False)) if t else 0 for t in record.get("reasoning", [])]
        answers = (record.get("resps") or [[]])[0]
        record["reasoning_tokens"] = counts
        record["answer_tokens"] = [len(tokenizer.encode(a, add_special_tokens=False)) if isinstance(a, str) else 0
                                   for a in answers]
        means.append(sum(counts) / len(counts) if counts else 0.0)
        record["metrics"]["reasoning_tokens"] = means[-1]
    return mean_ci(means)
