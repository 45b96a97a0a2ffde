"""Run-to-run noise: this machine's noise floor, and the intervals it widens.

A level measured once on one server start has an interval from its requests only; the same variant measured
again on a fresh server start lands elsewhere by more than that (on a 2-core CPU, tens of percent). The noise
floor is that spread, measured on the machine itself (benchmarks/noise_floor.py: the same variant, N cold
measurements): per figure, the standard deviation of its logarithm across the measurements, with N - 1
degrees of freedom. A single run's interval is widened by it, on the log scale (noise is multiplicative):

    half = sqrt(half_within^2 + (t(N-1) * sd)^2)

An interval of repeats in a row on one server start is widened the same way: those repeats share the start.
A figure the noise floor does not cover keeps an interval without run-to-run noise, and is not ranked.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

NOISE_FIGURES = ("output_tokens_per_s", "requests_per_s", "goodput_rps", "ttft_ms.p99", "e2e_ms.p99")


class NoiseFloorError(ValueError):
    pass


def measure(runs: dict[str, list[float]], where: dict[str, Any] | None = None) -> dict[str, Any]:
    """The noise floor of N cold measurements of one variant: {runs, figures: {name: {log_sd, spread}}, where}.
    `spread` is max/min - 1 of the measurements. A figure with fewer than 2 positive values is left out."""
    import numpy as np

    figures = {}
    for name, values in runs.items():
        values = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
        if len(values) >= 2:
            figures[name] = {"log_sd": float(np.log(values).std(ddof=1)), "spread": max(values) / min(values) - 1,
                             "runs": len(values)}
    return {"figures": figures, "where": where or {}}


def load(path: str | Path) -> dict[str, Any]:
    """A noise floor as benchmarks/noise_floor.py writes it; NoiseFloorError saying what is wrong."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise NoiseFloorError(f"{path}: cannot read a noise floor: {exc}")
    figures = data.get("figures") if isinstance(data, dict) else None
    if not isinstance(figures, dict) or not figures:
        raise NoiseFloorError(f"{path}: no figures (write it with benchmarks/noise_floor.py)")
    for name, f in figures.items():
        ok = isinstance(f, dict) and isinstance(f.get("log_sd"), (int, float)) and f["log_sd"] >= 0 \
            and isinstance(f.get("runs"), int) and f["runs"] >= 2
        if not ok:
            raise NoiseFloorError(f"{path}: figure {name!r} needs log_sd >= 0 and runs >= 2")
    return data


def noise_half(figure: dict[str, Any]) -> float:
    """The 95% half-width (log scale) that run-to-run noise alone gives one run: t(runs - 1) * log_sd."""
    from scipy.special import stdtrit   # only where a noise floor is used: an unchanged re-run imports no scipy

    from perf.repeats import CONFIDENCE

    return float(stdtrit(figure["runs"] - 1, 0.5 + CONFIDENCE / 2)) * figure["log_sd"]


def widen(ci: list[float | None] | None, median: float, figure: dict[str, Any]) -> list[float] | None:
    """A figure's interval widened by its noise floor; without a within-run interval, the noise floor's alone."""
    if median <= 0:
        return None
    within = 0.0
    if ci and None not in ci and min(ci) > 0:
        within = max(math.log(median / ci[0]), math.log(ci[1] / median), 0.0)
    half = math.hypot(within, noise_half(figure))
    return [median * math.exp(-half), median * math.exp(half)]


def with_noise_floor(level: dict[str, Any], floor: dict[str, Any] | None, source: str = "") -> dict[str, Any]:
    """A level summary (perf/repeats.py) with its figures' intervals widened by the noise floor, and
    `noise_floor` saying by what; the figures the floor does not cover are left as they are."""
    if not floor:
        return level
    figures, widened = dict(level["figures"]), {}
    for name, figure in level["figures"].items():
        noise = floor["figures"].get(name)
        if noise is None:
            continue
        ci = widen(figure.get("ci95"), figure["median"], noise)
        if ci:
            figures[name] = {**figure, "ci95": ci}
            widened[name] = {"log_sd": noise["log_sd"], "runs": noise["runs"]}
    if not widened:
        return level
    return {**level, "figures": figures, "noise_floor": {"source": source, "figures": widened}}


def has_run_to_run_noise(level: dict[str, Any] | None, name: str) -> bool:
    """Whether a level's interval of figure `name` includes run-to-run noise: repeats measured it, or a
    noise floor widened it."""
    if not level:
        return False
    return level.get("repeats", 1) > 1 or name in ((level.get("noise_floor") or {}).get("figures") or {})


def why_no_noise(level: dict[str, Any] | None, name: str) -> str:
    """Why figure `name` of a level has no interval with run-to-run noise (for a line that says it is not ranked)."""
    if not level or name not in level.get("figures", {}):
        return "not measured"
    return ("one run on one server start, and no noise floor of this machine covers it (repeat the level: "
            "the workload's repeats; or measure the noise floor: benchmarks/noise_floor.py, then perf.noise_floor)")
