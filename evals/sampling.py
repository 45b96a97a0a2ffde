"""Sampled evaluation: K answers per item (a task's `repeats`), each scored as lm-eval scores one answer.

An item's score is its success rate over its K samples, so every per-item comparison (the gate's paired
interval, `quant diff`, `quant choose`) works on rates as it works on 0/1 scores. Over the items: avg@K (the
mean rate, with its interval), Chen et al.'s unbiased pass@k for k <= K, maj@K (the score of the answer most
samples gave, answers compared by value) and the no-answer rate."""

from __future__ import annotations

import hashlib
import math
from collections import Counter

from evals.stats import mean_ci

NO_ANSWER = ("", "[invalid]")   # what lm-eval's extraction filters leave where they found no answer


def seed_for(doc_id: int, repeat: int) -> int:
    """The seed of one sample, from its item and its repeat: the same run sends the same seeds."""
    return int.from_bytes(hashlib.sha256(f"{doc_id}/{repeat}".encode()).digest()[:4], "big") & 0x7FFFFFFF


def pass_at_k(n: int, c: int, k: int) -> float:
    """Chen et al. (2021): the chance that at least one of k samples drawn from n, c of them right, is right."""
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def ks_for(repeats: int) -> list[int]:
    """The k reported for K samples: 1, the powers of two below K, and K."""
    return sorted({1, repeats} | {2 ** i for i in range(1, repeats.bit_length()) if 2 ** i < repeats})


def _value(answer) -> object:
    """An answer as compared by value: a number as its float ("42" == "42.0"), text stripped."""
    text = answer.strip() if isinstance(answer, str) else answer
    try:
        return float(text.replace(",", "")) if isinstance(text, str) else text
    except ValueError:
        return text


def no_answer(filtered) -> bool:
    return filtered is None or (isinstance(filtered, str) and filtered.strip() in NO_ANSWER)


def majority_score(answers: list, scores: list[float], unanswered: list[bool]) -> float | None:
    """The score of the answer most samples gave (the first to reach the top count on a tie), the unanswered
    left out of the vote; None where the answers are not values (a list, a dict, several lines: a program)."""
    if not all(isinstance(a, int | float) or isinstance(a, str) and "\n" not in a.strip() for a in answers):
        return None
    votes = [(i, _value(a)) for i, a in enumerate(answers) if not unanswered[i]]
    if not votes:
        return scores[0]
    counts = Counter(v for _, v in votes)
    top = max(counts.values())
    first = next(i for i, v in votes if counts[v] == top)
    return scores[first]


def _single(answer):
    """A filtered answer as its one value (lm-eval keeps an unfiltered one as a list of one)."""
    while isinstance(answer, list) and len(answer) == 1:
        answer = answer[0]
    return answer


def _response(record: dict):
    resps = record.get("resps")
    return resps[0][0] if resps and isinstance(resps[0], list) and resps[0] else None


def merge_records(repeats: list[list[dict]], filters: list[str], primary_key: str | None) -> list[dict]:
    """Per-repeat records (runner.summarise's, one list per repeat, the same items) -> one record per item:
    every sample's response kept, each metric the mean over the samples (`scores` keeps each sample's)."""
    first_filter = primary_key.partition(",")[2] if primary_key and "," in primary_key else \
        (filters[0] if filters else None)
    merged = []
    for records in zip(*repeats):
        base = dict(records[0])
        base["resps"] = [[_response(r) for r in records]]   # lm-eval's shape for repeats: [request][sample]
        base["filtered_resps"] = {f: [r["filtered_resps"].get(f) for r in records] for f in filters}
        keys = [k for k in records[0]["metrics"] if all(k in r["metrics"] for r in records)]
        base["scores"] = {k: [r["metrics"][k] for r in records] for k in keys}
        base["metrics"] = {k: sum(v) / len(v) for k, v in base["scores"].items()}
        answers = [_single(a) for a in base["filtered_resps"].get(first_filter) or [None] * len(records)]
        base["no_answer"] = [bool(r.get("reasoning_cut")) or no_answer(a) for r, a in zip(records, answers)]
        for field in ("reasoning", "reasoning_cut"):
            if any(field in r for r in records):
                base[field] = [r.get(field) for r in records]
        if primary_key in base["scores"] and first_filter not in (None, "none"):   # "none": the raw text
            base["majority"] = majority_score(answers, base["scores"][primary_key], base["no_answer"])
        merged.append(base)
    return merged


def sampled_summary(records: list[dict], primary_key: str, repeats: int, groups: list | None) -> dict:
    """avg@K with its interval, pass@k (where every sample scores 0 or 1), maj@K and the no-answer rate."""
    rates = [r["metrics"][primary_key] for r in records]
    out = {"repeats": repeats, "metric": primary_key, "avg": mean_ci(rates, groups)}
    per_sample = [r["scores"][primary_key] for r in records]
    if all(v in (0.0, 1.0) for scores in per_sample for v in scores):
        out["pass_at"] = {str(k): sum(pass_at_k(repeats, int(sum(s)), k) for s in per_sample) / len(per_sample)
                          for k in ks_for(repeats)}
    majority = [r.get("majority") for r in records]
    if all(m is not None for m in majority):
        out["majority"] = mean_ci(majority, groups)
    out["no_answer"] = mean_ci([sum(r["no_answer"]) / len(r["no_answer"]) for r in records])
    return out
