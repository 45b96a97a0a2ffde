"""When each request of an open-loop level is sent: offsets in seconds from the level's start."""

from __future__ import annotations

import numpy as np


def arrival_offsets(process: str, rate: float, n: int, rng: np.random.Generator, burstiness: float = 1.0) -> list[float]:
    """constant: every 1/rate s. poisson: exponential gaps of mean 1/rate. gamma: gaps with shape
    `burstiness` and mean 1/rate (vLLM's benchmark: burstiness 1 = Poisson, < 1 burstier, > 1 steadier)."""
    if n == 0:
        return []
    if process == "constant":
        gaps = np.full(n, 1.0 / rate)
    elif process == "poisson":
        gaps = rng.exponential(1.0 / rate, size=n)
    elif process == "gamma":
        gaps = rng.gamma(burstiness, 1.0 / (rate * burstiness), size=n)
    else:
        raise ValueError(f"unknown arrival process {process!r}")
    gaps[0] = 0.0   # the first request goes at once
    return np.cumsum(gaps).tolist()


def burst_offsets(offsets: list[float], fraction: float, size: int, rng: np.random.Generator) -> list[float]:
    """Extra requests on top of a level (`fraction` of its count) in groups of `size` that arrive at one
    instant, at random times within the level."""
    groups = int(round(len(offsets) * fraction / size))
    if groups == 0 or not offsets:
        return []
    return [float(t) for t in rng.uniform(0, max(offsets[-1], 1e-3), size=groups) for _ in range(size)]
