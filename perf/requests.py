"""The requests of one workload level: lengths, arrival offsets, and the dirt the profile adds."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from perf.lengths import longest, sample_lengths
from core.recipe_perf import Workload

OPEN_LOOP_SECONDS = 10   # default length of an open-loop level: rate x this many requests (at least 16)


@dataclass
class Planned:
    prompt: list[int]
    output_tokens: int
    offset_s: float | None = None   # open loop: when to send, from the level's start
    kind: str = "base"               # base | long | burst | trace


def requests_per_level(workload: Workload, kind: str, level: float) -> int:
    if workload.requests_per_level:
        if kind == "rate" and workload.min_seconds:   # an open loop lasts as long as its planned arrivals
            return max(workload.requests_per_level, int(round(level * workload.min_seconds)))
        return workload.requests_per_level
    if kind == "concurrency":
        return max(16, 8 * int(level))
    return max(16, int(round(level * max(OPEN_LOOP_SECONDS, workload.min_seconds or 0))))


def read_trace(path: str | Path) -> list[tuple[float, int, int]]:
    """(arrival offset s, input tokens, output tokens) per JSONL row, sorted; arrival from `arrival_s`
    (seconds) or `timestamp` (seconds or ISO 8601), relative to the first request."""
    rows = []
    for i, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            t = row["arrival_s"] if "arrival_s" in row else row["timestamp"]
            t = datetime.fromisoformat(t).timestamp() if isinstance(t, str) else float(t)
            rows.append((t, int(row["input_tokens"]), int(row["output_tokens"])))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{i}: needs arrival_s or timestamp, input_tokens, output_tokens ({exc})")
    if not rows:
        raise ValueError(f"{path}: no requests in it")
    rows.sort()
    return [(t - rows[0][0], n_in, n_out) for t, n_in, n_out in rows]


def longest_request(workload: Workload) -> int:
    """Tokens (prompt + output) of the longest request the workload plans: long prompts and trace rows count;
    a distribution counts its `max` (perf/lengths.py `longest`)."""
    if workload.trace:
        return max(n_in + n_out for _, n_in, n_out in read_trace(workload.trace))
    prompt = longest(workload.prompt_tokens)
    if workload.long_prompts:
        prompt = max(prompt, workload.long_prompts.tokens)
    return prompt + longest(workload.output_tokens)


def level_seed(seed: int, level: float, repeat: int = 0) -> list[int]:
    """The random state of one run of a level: every repeat of a level draws other prompts (a repeat of the same
    prompts would be served from the engine's prefix cache); the first run's is the same as without repeats."""
    return [seed, int(level * 1000)] + ([repeat] if repeat else [])


def plan_level(workload: Workload, kind: str, level: float, maker: PromptMaker, seed: int,
               limit: int | None = None, repeat: int = 0) -> list[Planned]:
    """The requests of one level (its `repeat`-th run, from 0); with `limit`, only the first `limit` (e.g. a
    warm-up), and no more built."""
    import numpy as np   # where requests are drawn: the memory columns of a cached sweep read only their lengths

    from perf.arrivals import arrival_offsets, burst_offsets

    rng = np.random.default_rng(level_seed(seed, level, repeat))
    if kind == "trace":
        rows = read_trace(workload.trace)[:limit if limit is not None else workload.requests_per_level]
        return [Planned(maker.make(n_in, rng), n_out, t / level, "trace") for t, n_in, n_out in rows]
    n = requests_per_level(workload, kind, level)
    if limit is not None:
        n = min(n, limit)
        if n == 0:
            return []
    rows = _rows(workload, n, "base", rng)
    if workload.long_prompts:
        for i in rng.choice(n, size=max(1, int(round(n * workload.long_prompts.fraction))), replace=False):
            rows[i] = (workload.long_prompts.tokens, rows[i][1], "long")
    offsets: list[float | None] = [None] * n
    if kind == "rate":
        offsets = arrival_offsets(workload.arrival, level, n, rng, workload.burstiness)
        if workload.bursts:
            extra = burst_offsets(offsets, workload.bursts.fraction, workload.bursts.size, rng)
            merged = sorted(zip(offsets + extra, rows + _rows(workload, len(extra), "burst", rng)),
                            key=lambda pair: pair[0])
            offsets, rows = [t for t, _ in merged], [r for _, r in merged]
    shared = maker.shared(workload.shared_prefix.tokens, rng) if workload.shared_prefix else None
    fraction = workload.shared_prefix.fraction if shared else 0.0
    return [Planned(maker.make(p, rng, shared if rng.random() < fraction else None), o, t, k)
            for (p, o, k), t in zip(rows, offsets)][:limit]


def _rows(workload: Workload, n: int, kind: str, rng: np.random.Generator) -> list[tuple[int, int, str]]:
    prompts = sample_lengths(workload.prompt_tokens, n, rng)
    outputs = sample_lengths(workload.output_tokens, n, rng)
    return [(p, o, kind) for p, o in zip(prompts, outputs)]
