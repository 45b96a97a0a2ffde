"""Which way a metric points, and which metrics are not a mean of per-item scores (so cannot be paired)."""

from __future__ import annotations

# lm-eval metrics where a smaller number is better (their task configs say higher_is_better: false).
LOWER_IS_BETTER = {"perplexity", "word_perplexity", "byte_perplexity", "bits_per_byte", "ter", "brier_score"}
# Metrics whose task score is not the mean of per-item values (corpus-level or perplexity-style).
NOT_A_MEAN = {"perplexity", "word_perplexity", "byte_perplexity", "bits_per_byte", "bleu", "chrf", "ter",
              "brier_score", "f1_macro", "mcc"}


def base_name(metric: str) -> str:
    return metric.split(",")[0]   # "exact_match,strict-match" -> "exact_match"


def higher_is_better(entry: dict) -> bool:
    """An accuracy entry's direction: as recorded from the task config, else by lm-eval's metric name."""
    recorded = entry.get("higher_is_better")
    return bool(recorded) if recorded is not None else base_name(entry["metric"]) not in LOWER_IS_BETTER


def is_mean_metric(entry: dict) -> bool:
    aggregation = entry.get("aggregation")
    return base_name(entry["metric"]) not in NOT_A_MEAN and aggregation in (None, "mean")
