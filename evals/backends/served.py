"""An lm-eval LM that sends every request to an OpenAI-compatible /v1/completions at once (bounded)."""

from __future__ import annotations

import asyncio
import random

import httpx
from lm_eval.api.model import LM


MAX_SERVER_STOPS = 4  # vLLM's OpenAI schema caps `stop` at 4 strings; the rest are applied here


def truncate_at_stops(text: str, stops: list[str]) -> str:
    cut = min((i for i in (text.find(s) for s in stops if s) if i >= 0), default=len(text))
    return text[:cut]


class ServedLM(LM):
    def __init__(self, completions_url: str, model: str, concurrency: int = 32, max_retries: int = 4,
                 timeout_s: float = 300.0, progress=None) -> None:
        super().__init__()
        self.url, self.model = completions_url, model
        self.concurrency, self.max_retries, self.timeout_s = concurrency, max_retries, timeout_s
        self.progress = progress  # callable(n_done) or None

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        return asyncio.run(self._generate_all([r.args for r in requests]))

    async def _generate_all(self, args: list[tuple[str, dict]]) -> list[str]:
        limits = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency)
        gate = asyncio.Semaphore(self.concurrency)
        async with httpx.AsyncClient(timeout=self.timeout_s, limits=limits) as client:
            async def one(context: str, gen_kwargs: dict) -> str:
                async with gate:
                    text = await self._complete(client, context, gen_kwargs)
                if self.progress:
                    self.progress(1)
                return text
            return await asyncio.gather(*(one(c, g) for c, g in args))

    async def _complete(self, client: httpx.AsyncClient, context: str, gen_kwargs: dict) -> str:
        until = gen_kwargs.get("until") or []
        until = [until] if isinstance(until, str) else list(until)
        body = {
            "model": self.model, "prompt": context,
            "max_tokens": int(gen_kwargs.get("max_gen_toks", 256)),
            "temperature": float(gen_kwargs.get("temperature", 0.0)),
            "stop": until[:MAX_SERVER_STOPS],
            "seed": 1234,
        }
        for attempt in range(self.max_retries + 1):
            try:
                response = await client.post(self.url, json=body)
                if response.status_code == 200:
                    return truncate_at_stops(response.json()["choices"][0]["text"], until)
                if response.status_code < 500 and response.status_code != 429:  # our request is wrong: no retry
                    raise RuntimeError(f"HTTP {response.status_code} from {self.url}: {response.text[:300]}")
                error = f"HTTP {response.status_code}: {response.text[:200]}"
            except (httpx.TransportError, httpx.TimeoutException) as exc:
                error = f"{type(exc).__name__}: {exc}"
            if attempt == self.max_retries:
                raise RuntimeError(f"completion failed after {attempt + 1} attempts: {error}")
            await asyncio.sleep(min(8.0, 0.5 * 2 ** attempt) * (0.5 + random.random()))
        raise AssertionError("unreachable")

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError("the served backend runs generate_until tasks; use an in-process backend "
                                  "for loglikelihood tasks")

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError("the served backend runs generate_until tasks")
