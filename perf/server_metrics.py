"""Cross-check the client against the server: vLLM's Prometheus counters read before and after a run."""

from __future__ import annotations

import asyncio
import math

import aiohttp

# The server's own latency histograms (timed in its API server process, before the HTTP response): their
# mean over a run, next to the client's, is what the client adds.
LATENCIES = {"ttft": "vllm:time_to_first_token_seconds", "itl": "vllm:inter_token_latency_seconds",
             "e2e": "vllm:e2e_request_latency_seconds"}
COUNTERS = {"generation_tokens": "vllm:generation_tokens_total", "prompt_tokens": "vllm:prompt_tokens_total",
            "requests": "vllm:request_success_total",
            # tokens of prompts looked up in the prefix cache, and found there
            "prefix_cache_queries": "vllm:prefix_cache_queries_total", "prefix_cache_hits": "vllm:prefix_cache_hits_total",
            **{f"{key}_{part}": f"{metric}_{part}" for key, metric in LATENCIES.items() for part in ("sum", "count")}}


SCRAPE_DEADLINE_S = 10.0
MAX_METRICS_BYTES = 16 * 2**20
COUNTER_LIMIT = 1e15          # a counter above this (tokens, requests, seconds) is no server's: not used
LATENCY_LIMIT_MS = 86_400_000.0   # a mean latency beyond a day is not a measurement: not used


def parse_counters(text: str) -> dict[str, float]:
    """Sum each counter over its label sets (one per model, finish reason, ...)."""
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_and_labels, _, value = line.rpartition(" ")
        name = name_and_labels.split("{", 1)[0]
        for key, metric in COUNTERS.items():
            if name == metric:
                number = float(value)
                if not math.isfinite(number) or not 0 <= number <= COUNTER_LIMIT:
                    raise ValueError(f"counter {name} is {value[:40]}")
                totals[key] = totals.get(key, 0.0) + number
    return totals


async def read_counters(client: aiohttp.ClientSession, base_url: str) -> dict[str, float] | None:
    try:
        async with client.get(f"{base_url}/metrics", allow_redirects=False,
                              timeout=aiohttp.ClientTimeout(total=SCRAPE_DEADLINE_S)) as resp:
            if resp.status != 200:
                return None
            body = bytearray()
            async for chunk in resp.content.iter_any():
                body += chunk
                if len(body) > MAX_METRICS_BYTES:
                    return None
            return parse_counters(body.decode("utf-8", "replace"))
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):   # ValueError: a counter that is no number
        return None


def crosscheck(before: dict[str, float] | None, after: dict[str, float] | None, client_output_tokens: int,
               client_prompt_tokens: int) -> dict | None:
    """Server-side deltas next to what the client counted; None where the server exposes no metrics."""
    if not before or not after or "generation_tokens" not in after:
        return None
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in COUNTERS}
    check = {"server_output_tokens": int(delta["generation_tokens"]), "client_output_tokens": client_output_tokens,
             "server_prompt_tokens": int(delta["prompt_tokens"]), "client_prompt_tokens": client_prompt_tokens,
             "server_requests": int(delta["requests"]),
             "match": int(delta["generation_tokens"]) == client_output_tokens}
    if "prefix_cache_queries" in after:
        check.update(prefix_cache_hit_tokens=int(delta["prefix_cache_hits"]),
                     prefix_cache_query_tokens=int(delta["prefix_cache_queries"]))
    return check | server_latency_means(delta)


PREFIX_HIT_LIMIT = 0.05   # a workload without a shared prefix: above this share of prompt tokens, a cache reused them


def prefix_cache_note(check: dict | None, shared_prefix: bool) -> str | None:
    """Why a level's prompts were not all prefilled: the prefix cache served more than PREFIX_HIT_LIMIT of its
    prompt tokens though the workload shares no prefix (a repeat of earlier prompts measures a warm cache)."""
    if shared_prefix or not check or not check.get("prefix_cache_query_tokens"):
        return None
    share = check["prefix_cache_hit_tokens"] / check["prefix_cache_query_tokens"]
    if share <= PREFIX_HIT_LIMIT:
        return None
    return (f"the prefix cache served {share:.0%} of its prompt tokens though the workload shares no prefix: "
            "prefill was skipped, TTFT and tokens/s are those of a warm cache")


def server_latency_means(delta: dict[str, float]) -> dict[str, float]:
    """{"server_ttft_ms_mean": ..., ...} from histogram sum and count deltas: absent where the count is under one
    observation or the mean is not a latency (negative, or beyond LATENCY_LIMIT_MS)."""
    means = {}
    for key in LATENCIES:
        count, total = delta.get(f"{key}_count", 0), delta.get(f"{key}_sum", 0)
        if count >= 1 and total >= 0:
            mean = 1000 * total / count
            if math.isfinite(mean) and mean <= LATENCY_LIMIT_MS:
                means[f"server_{key}_ms_mean"] = mean
    return means
