"""KL divergence of next-token distributions, baseline against candidate, from the engine's top-k logprobs.

Both variants score the same text: the task's prompt followed by the baseline's own answer, teacher-forced,
so every position conditions on the same prefix. At each answer token, KL(P_baseline || P_candidate) is
computed over the baseline's top-k tokens plus one bucket for all other tokens (the distributions coarsened
that way). Coarsening can only lower a KL, so with k = 20 this is close to, and at most about, the full KL;
a token outside the candidate's top-k is given the candidate's smallest listed probability.
"""

from __future__ import annotations

import math

TOP_K = 20          # vLLM's default --max-logprobs
MIN_MASS = 1e-6     # probability floor for the rest-of-vocabulary bucket


def position_kl(p: dict[str, float], q: dict[str, float]) -> float:
    """KL(P || Q) in nats at one position; p and q map token -> logprob (top-k of each)."""
    if not p or not q:
        return float("nan")
    floor = min(q.values())
    q_lp = {t: q.get(t, floor) for t in p}
    kl = sum(math.exp(lp) * (lp - q_lp[t]) for t, lp in p.items())
    p_rest = 1.0 - sum(math.exp(lp) for lp in p.values())
    q_rest = 1.0 - sum(math.exp(lp) for lp in q_lp.values())
    if p_rest > MIN_MASS:
        kl += p_rest * (math.log(p_rest) - math.log(max(q_rest, MIN_MASS)))
    return max(kl, 0.0)


def item_kl(base: list[dict[str, float]], cand: list[dict[str, float]]) -> float | None:
    """Mean KL over an answer's tokens; None for an empty answer."""
    values = [position_kl(p, q) for p, q in zip(base, cand)]
    values = [v for v in values if not math.isnan(v)]
    return sum(values) / len(values) if values else None


def item_top1_agreement(base: list[dict[str, float]], cand: list[dict[str, float]]) -> float | None:
    """The fraction of an answer's positions where both put the same token first (ModelOpt reports the
    mismatch beside the KL); None for an empty answer."""
    same = [max(p, key=p.get) == max(q, key=q.get) for p, q in zip(base, cand) if p and q]
    return sum(same) / len(same) if same else None


def reference_pairs(samples: list[dict], limit: int) -> list[tuple[int, str, str]]:
    """(doc_id, prompt, the baseline's answer) for the first `limit` generated answers; for a multiple-choice
    item, the right choice is the answer."""
    pairs = []
    for s in samples:
        answer = (s.get("resps") or [[None]])[0][0]
        answer = answer if isinstance(answer, str) else s.get("gold_continuation")
        if isinstance(answer, str) and answer and isinstance(s.get("prompt"), str):
            pairs.append((s["doc_id"], s["prompt"], answer))
    return pairs[:limit]
