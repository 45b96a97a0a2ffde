"""What a stage's check of its part of a recipe finds before work (quantize/validate.py, perf/validate.py,
evals/validate.py; quant/validate.py collects them and locates each in the recipe file)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Problem = tuple[tuple, str]   # (where in the recipe, e.g. ("variants", 1, "ignore", 0); message)


@dataclass
class Found:
    errors: list[Problem] = field(default_factory=list)     # any: nothing may start
    warnings: list[Problem] = field(default_factory=list)   # worth reading; the sweep goes on
    notes: list[Problem] = field(default_factory=list)      # what a policy chose (e.g. unfit_groups: keep)


def as_int(value: Any) -> int | None:
    """A count of tokens as a recipe gives it (an int, or digits); None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    return int(value) if isinstance(value, str) and value.isdigit() else None
