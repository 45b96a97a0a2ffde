"""Cross-check the client against the server: vLLM's Prometheus counters read before and after a run."""

from __future__ import annotations

import asyncio

import aiohttp

COUNTERS = {"generation_tokens": "vllm:generation_tokens_total", "prompt_tokens": "vllm:prompt_tokens_total",
            "requests": "vllm:request_success_total"}


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
                totals[key] = totals.get(key, 0.0) + float(value)
    return totals


async def read_counters(client: aiohttp.ClientSession, base_url: str) -> dict[str, float] | None:
    try:
        async with client.get(f"{base_url}/metrics") as resp:
            return parse_counters(await resp.text()) if resp.status == 200 else None
    except (aiohttp.ClientError, asyncio.TimeoutError):
        return None


def crosscheck(before: dict[str, float] | None, after: dict[str, float] | None, client_output_tokens: int,
               client_prompt_tokens: int) -> dict | None:
    """Server-side deltas next to what the client counted; None where the server exposes no metrics."""
    if not before or not after or "generation_tokens" not in after:
        return None
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in COUNTERS}
    return {"server_output_tokens": int(delta["generation_tokens"]), "client_output_tokens": client_output_tokens,
            "server_prompt_tokens": int(delta["prompt_tokens"]), "client_prompt_tokens": client_prompt_tokens,
            "server_requests": int(delta["requests"]),
            "match": int(delta["generation_tokens"]) == client_output_tokens}
