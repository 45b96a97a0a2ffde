"""Token lengths per request: a fixed number or a distribution (recipe `Lengths`), clipped to [min, max].
numpy is imported where lengths are drawn: a cached sweep reads `longest` of fixed lengths without it."""

from __future__ import annotations

import json
from pathlib import Path


def _empirical_values(spec) -> np.ndarray:
    import numpy as np

    if spec.values:
        return np.asarray(spec.values)
    values = []
    for number, line in enumerate(Path(spec.file).read_text().splitlines(), 1):
        line = line.strip()
        if line:
            try:
                values.append(int(json.loads(line)[spec.field]) if spec.field else int(line))
            except (ValueError, KeyError, TypeError):
                what = f"a JSON object with an integer {spec.field!r}" if spec.field else "an integer"
                raise ValueError(f"{spec.file}:{number}: not {what}: {line[:80]!r}") from None
    if not values:
        raise ValueError(f"{spec.file}: no lengths in it")
    return np.asarray(values)


def sample_lengths(spec, n: int, rng: np.random.Generator) -> list[int]:
    """n lengths from `spec`: an int (fixed) or a recipe Lengths."""
    if isinstance(spec, int):
        return [spec] * n
    import numpy as np

    if spec.dist == "fixed":
        raw = np.full(n, spec.value)
    elif spec.dist == "uniform":
        raw = rng.integers(spec.min, spec.max + 1, size=n)
    elif spec.dist == "normal":
        raw = rng.normal(spec.mean, spec.std, size=n)
    elif spec.dist == "lognormal":
        # mean of a lognormal = exp(mu + sigma^2 / 2): choose mu so the lengths average `mean`
        mu = np.log(spec.mean) - spec.sigma ** 2 / 2
        raw = rng.lognormal(mu, spec.sigma, size=n)
    else:
        raw = rng.choice(_empirical_values(spec), size=n)
    upper = spec.max if spec.max is not None else np.inf
    return [int(x) for x in np.clip(np.rint(raw), spec.min, upper)]


Z_999 = 3.090232   # standard normal 99.9th percentile


def longest(spec) -> int:
    """The longest length `spec` plans: a fixed length; else the distribution's `max` when set; else the
    largest empirical value, or the 99.9th percentile of a normal or lognormal without a `max`."""
    if isinstance(spec, int):
        return spec
    if spec.dist == "fixed":
        return spec.value
    if spec.max is not None:
        return spec.max
    import numpy as np

    if spec.dist == "empirical":
        return max(spec.min, int(_empirical_values(spec).max()))
    if spec.dist == "normal":
        tail = spec.mean + Z_999 * spec.std
    else:   # lognormal, with mu chosen as sample_lengths does
        tail = float(np.exp(np.log(spec.mean) - spec.sigma ** 2 / 2 + Z_999 * spec.sigma))
    return max(spec.min, int(np.ceil(tail)))
