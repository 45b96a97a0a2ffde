"""The field's ratios against the baseline: recovery (llm-compressor's quantized / baseline score) and output
length (MLPerf's mean generated tokens relative to the reference's)."""

from __future__ import annotations

from core.results import Accuracy
from reports.metric_kinds import higher_is_better


def recovery(base: Accuracy | None, cand: Accuracy | None) -> float | None:
    """candidate / baseline for a metric where higher is better, baseline / candidate where lower is (so that
    above 1 is better either way); None where the denominator is 0."""
    if base is None or cand is None:
        return None
    num, den = (cand.value, base.value) if higher_is_better(base.dump()) else (base.value, cand.value)
    return num / den if den else None


def length_ratio(base: Accuracy | None, cand: Accuracy | None) -> float | None:
    """Mean tokens of the candidate's generated answers over the baseline's; None where either has none."""
    if base is None or cand is None or base.response_tokens is None or cand.response_tokens is None:
        return None
    return cand.response_tokens.value / base.response_tokens.value if base.response_tokens.value else None
