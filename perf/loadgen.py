"""A lean load generator: asyncio + aiohttp, streaming /v1/completions with token-id prompts; closed loop
(a fixed number of requests in flight) or open loop (requests sent at planned instants).

Kept small on purpose: on 2 cores a heavy client steals CPU from the server it measures. aiohttp (its HTTP
parser is C) spends a third of the CPU per streamed token that httpx does (benchmarks/client_overhead.py)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import aiohttp

from core import http_policy
from core.foreign_text import capped, clean_text


REQUEST_DEADLINE_S = 3600.0   # one streamed request, in all: a server that trickles tokens forever is cut here


@dataclass
class RequestRecord:
    start: float                     # time.perf_counter() when the request was sent
    ttft_s: float | None = None      # to the first chunk that carries a token
    itl_s: list[float] = field(default_factory=list)   # one gap per output token after the first
    e2e_s: float | None = None       # to the end of the stream (or to the failure)
    prompt_tokens: int | None = None  # usage.prompt_tokens as the server counted them
    output_tokens: int = 0           # the tokens received (usage.completion_tokens where it agrees with them)
    error: str | None = None
    chunks: int = 0                  # token-bearing SSE chunks (== output_tokens unless the server batches)
    lag_s: float | None = None       # open loop: sent this late after its planned instant (client or cap)
    kind: str = "base"               # base | long | burst | trace (perf/requests.py)


@contextlib.contextmanager
def no_gc_pauses() -> Iterator[None]:
    """No garbage-collector pass while requests are timed. A full pass over a process that has imported
    torch and transformers (as a sweep has) stops the event loop for a fifth of a second (measured: 220 ms
    over 470k objects), and every stream in flight would carry that stall as latency. So: collect now,
    freeze what exists out of later passes, and collect nothing until the block ends; what requests leave
    behind is freed by reference counting."""
    gc.collect()
    gc.freeze()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
        gc.unfreeze()


def request_body(model: str, prompt: list[int] | str, output_tokens: int) -> dict:
    return {
        "model": model, "prompt": prompt, "max_tokens": output_tokens, "ignore_eos": True,
        "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
        # vLLM extension: each chunk lists its token ids, so a chunk holding several tokens is counted right.
        "return_token_ids": True,
    }


def make_client(concurrency: int, timeout_s: float = http_policy.STALL_S, headers: dict[str, str] | None = None,
                url: str = "http://127.0.0.1") -> aiohttp.ClientSession:
    """One session per workload to the server at url, `concurrency` keep-alive connections, under the suite's
    HTTP policy (core/http_policy.py: proxy, CA bundle); a read may stall up to timeout_s, a request take up
    to REQUEST_DEADLINE_S in all. Bodies are asked for and read unencoded: a compressed one is refused, never
    inflated."""
    connector = aiohttp.TCPConnector(limit=concurrency, ssl=http_policy.ssl_context())
    return aiohttp.ClientSession(connector=connector, headers={"Accept-Encoding": "identity", **(headers or {})},
                                 auto_decompress=False, **http_policy.aiohttp_options(url),
                                 timeout=aiohttp.ClientTimeout(total=max(timeout_s, REQUEST_DEADLINE_S),
                                                               sock_connect=30, sock_read=timeout_s))


def _tokens_in(choice: dict) -> int:
    ids = choice.get("token_ids")
    if ids is not None:
        return len(ids)
    return 1 if (choice.get("text") or choice.get("finish_reason") is None) else 0


async def one_request(client: aiohttp.ClientSession, url: str, body: dict) -> RequestRecord:
    rec = RequestRecord(start=time.perf_counter())
    last = rec.start
    counted, done, exact = 0, False, True   # exact: every token-bearing chunk listed its token ids
    try:
        async with client.post(url, json=body, allow_redirects=False) as resp:
            if resp.status != 200:
                text = (await resp.content.read(300)).decode("utf-8", "replace")
                rec.error = f"HTTP {resp.status}: {clean_text(text)}"
                return rec
            if encodings := http_policy.content_encodings(resp.headers):
                raise http_policy.PolicyError(f"the stream is encoded {capped(','.join(encodings), 40)}: "
                                              "only an unencoded stream is read")
            read = 0
            async for line in resp.content:    # one SSE line at a time
                read += len(line)
                if read > http_policy.MAX_BODY_BYTES:
                    raise http_policy.PolicyError(f"the stream is larger than {http_policy.MAX_BODY_BYTES} bytes")
                if not line.startswith(b"data:"):
                    continue
                now = time.perf_counter()
                data = line[5:].strip()
                if data == b"[DONE]":
                    done = True
                    break
                chunk = http_policy.parse_json(data)
                if not isinstance(chunk, dict):
                    raise ValueError("a stream chunk is not a JSON object")
                if "error" in chunk:
                    err = chunk["error"]
                    err = err.get('message', err) if isinstance(err, dict) else err
                    rec.error = f"stream error: {capped(clean_text(str(err)), 300)}"
                    break
                if chunk.get("usage"):
                    if not isinstance(chunk["usage"], dict):
                        raise ValueError("the stream's usage is not a JSON object")
                    rec.prompt_tokens = token_count(chunk["usage"].get("prompt_tokens"), allow_none=True)
                    rec.output_tokens = token_count(chunk["usage"].get("completion_tokens", 0))
                choices = chunk.get("choices") or []
                if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
                    raise ValueError("a stream chunk's choices are not a list of objects")
                exact = exact and all(c.get("token_ids") is not None for c in choices if _tokens_in(c))
                k = sum(_tokens_in(c) for c in choices)
                if k == 0:
                    continue
                rec.chunks += 1
                if rec.ttft_s is None:
                    rec.ttft_s = now - rec.start
                    rec.itl_s += [0.0] * (k - 1)        # tokens delivered together with the first one
                else:
                    rec.itl_s += [(now - last) / k] * k  # spread a multi-token chunk's gap over its tokens
                last = now
                counted += k
    except Exception as exc:   # a failed request is a data point, never a crash of the sweep
        rec.error = capped(clean_text(f"{type(exc).__name__}: {exc}".rstrip(": ")), 300)
    finally:
        rec.e2e_s = time.perf_counter() - rec.start
    if rec.error is None and done and rec.output_tokens:
        rec.error = usage_problem(rec.output_tokens, counted, exact, body.get("max_tokens"))
    if rec.error is not None or not rec.output_tokens:
        rec.output_tokens = counted
    if rec.error is None and not done:
        rec.error = "stream ended before [DONE]"   # e.g. the server died mid-response
    elif rec.error is None and counted == 0:
        rec.error = "stream carried no tokens"
    return rec


def usage_problem(claimed: int, received: int, exact: bool, asked: int | None) -> str | None:
    """Why a stream's usage.completion_tokens cannot be its output, else None: where every chunk listed its token
    ids it must equal what arrived; where chunks carried text only (one may hold several tokens) it must lie
    between the chunks that arrived and the tokens asked for."""
    if exact and claimed != received:
        return f"usage claims {claimed:,} output tokens, the stream carried {received:,}"
    if not exact and (claimed < received or (asked is not None and claimed > asked)):
        return (f"usage claims {claimed:,} output tokens, the stream carried {received:,} chunks"
                + (f" for {asked:,} tokens asked" if asked is not None else ""))
    return None


def token_count(value, allow_none: bool = False) -> int | None:
    """A server's token count: a non-negative int below a billion; ValueError for anything else."""
    if value is None and allow_none:
        return None
    if type(value) is not int or not 0 <= value < 10**9:
        raise ValueError(f"the server's usage counts {str(value)[:40]!r} tokens")
    return value


def _per_request(output_tokens: int | list[int], n: int) -> list[int]:
    return list(output_tokens) if isinstance(output_tokens, list) else [output_tokens] * n


async def run_closed_loop(completions_url: str, model: str, prompts: list[list[int]],
                          output_tokens: int | list[int], concurrency: int, *,
                          client: aiohttp.ClientSession | None = None,
                          on_done: Callable[[RequestRecord], None] | None = None) -> list[RequestRecord]:
    """Send every prompt, keeping `concurrency` requests in flight; records come back in prompt order.

    A worker sends its next request the moment its previous one ends (a closed loop)."""
    own = client is None
    client = client or make_client(concurrency, url=completions_url)
    outputs = _per_request(output_tokens, len(prompts))
    records: list[RequestRecord | None] = [None] * len(prompts)
    queue = iter(range(len(prompts)))   # shared by the workers; safe since asyncio is single-threaded

    async def worker() -> None:
        for i in queue:
            rec = await one_request(client, completions_url, request_body(model, prompts[i], outputs[i]))
            records[i] = rec
            if on_done:
                on_done(rec)

    try:
        await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, len(prompts))))))
    finally:
        if own:
            await client.close()
    return [r for r in records if r is not None]


async def run_open_loop(completions_url: str, model: str, prompts: list[list[int]], output_tokens: list[int],
                        offsets_s: list[float], *, max_concurrency: int | None = None,
                        client: aiohttp.ClientSession, on_done: Callable[[RequestRecord], None] | None = None
                        ) -> list[RequestRecord]:
    """Send request i at offsets_s[i] after the start, whether or not earlier ones have finished (an open
    loop: the server's slowness does not slow the arrivals). With max_concurrency, a request whose instant
    comes while that many are in flight waits for a slot; its lag_s says how long."""
    slots = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    t0 = time.perf_counter()

    async def fire(i: int) -> RequestRecord:
        delay = t0 + offsets_s[i] - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        async with slots or contextlib.nullcontext():
            rec = await one_request(client, completions_url, request_body(model, prompts[i], output_tokens[i]))
        rec.lag_s = rec.start - (t0 + offsets_s[i])
        if on_done:
            on_done(rec)
        return rec

    return list(await asyncio.gather(*(fire(i) for i in range(len(prompts)))))

