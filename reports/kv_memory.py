"""A variant's KV-cache memory as the reports use it: the engine's own figures (its start-up log) where the run
recorded them, else those computed from the model config (perf/memory.py)."""

from __future__ import annotations

from core.results import VariantRecord


def kv_bytes_per_token(variant: VariantRecord) -> int | None:
    memory = variant.memory
    return memory.engine_kv_bytes_per_token if memory.engine_kv_bytes_per_token is not None \
        else memory.kv_bytes_per_token


def max_sequences(variant: VariantRecord) -> int | None:
    """Sequences of the first workload's longest request whose KV cache fits at once."""
    memory = variant.memory
    return memory.engine_max_sequences if memory.engine_max_sequences is not None else memory.max_sequences


def measured(variant: VariantRecord) -> bool:
    return variant.memory.engine_kv_tokens is not None


def bytes_per_sequence(variant: VariantRecord) -> float:
    """What serving one sequence holds: the weights, plus the KV cache of the first workload's longest request
    (where the run knows its bytes per token). `quant choose --objective memory` minimises it."""
    size = variant.size_bytes if variant.size_bytes is not None else float("inf")
    per_token = kv_bytes_per_token(variant)
    seq = variant.memory.engine_seq_tokens or variant.memory.seq_tokens
    return size + (per_token * seq if per_token is not None and seq else 0)
