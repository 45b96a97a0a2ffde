"""A level's time budget: at least `min_s` of measured load (more fresh requests where the planned ones end
sooner) and at most `max_s` (no request sent after it; those in flight finish). Warm-up is never counted: the
clock starts with the first measured request."""

from __future__ import annotations

import time
from typing import Callable


class Budget:
    """Hands out the index of the next request a closed-loop worker sends, or None when the level is done.
    `more()` returns one more (prompt, output tokens) to append when the planned ones ran out before `min_s`."""

    def __init__(self, min_s: float | None = None, max_s: float | None = None,
                 more: Callable[[], tuple[list[int] | str, int]] | None = None):
        self.min_s, self.max_s, self.more = min_s, max_s, more
        self.sent, self.t0 = 0, None

    def start(self) -> None:
        self.t0 = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0 if self.t0 is not None else 0.0

    def next_index(self, prompts: list, outputs: list[int]) -> int | None:
        """The next request's index into prompts/outputs (extended in place by `more`), or None."""
        if self.max_s is not None and self.elapsed() >= self.max_s:
            return None
        if self.sent >= len(prompts):
            if self.more is None or self.min_s is None or self.elapsed() >= self.min_s:
                return None
            prompt, output = self.more()
            prompts.append(prompt)
            outputs.append(output)
        self.sent += 1
        return self.sent - 1
