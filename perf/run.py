"""Run one workload (a sweep over concurrency levels) against a served model."""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

from perf.engines.vllm import VLLMServer
from perf.loadgen import RequestRecord, make_client, run_closed_loop, synthetic_prompts
from perf.metrics import summarize
from quant.recipe import Workload

Progress = Callable[[int, int], None]   # (done, total), warm-up requests included
RSS_SAMPLE_S = 0.5


def requests_per_level(workload: Workload, concurrency: int) -> int:
    return workload.requests_per_level or max(16, 8 * concurrency)


def completions_url(server_or_url: VLLMServer | str) -> str:
    if not isinstance(server_or_url, str):
        return server_or_url.completions_url
    url = server_or_url.rstrip("/")
    return url if url.endswith("/v1/completions") else url + "/v1/completions"


def run_workload(server_or_url: VLLMServer | str, model_name: str, tokenizer_path: str | Path,
                 workload: Workload, progress: Progress | None = None, seed: int = 0) -> dict[str, Any]:
    """For each concurrency level: warm-up requests (discarded), then the measured closed loop.

    Every request gets a fresh random prompt (seeded), so no level is served from the prefix cache."""
    plan = [(c, workload.warmup_requests, requests_per_level(workload, c)) for c in workload.concurrency]
    total = sum(w + n for _, w, n in plan)
    prompts = synthetic_prompts(tokenizer_path, total, workload.prompt_tokens, seed)
    server = None if isinstance(server_or_url, str) else server_or_url
    points, records = asyncio.run(_sweep(completions_url(server_or_url), model_name, prompts, plan,
                                         workload.output_tokens, server, progress))
    result: dict[str, Any] = {
        "workload": workload.name,
        "prompt_tokens": workload.prompt_tokens,
        "output_tokens": workload.output_tokens,
        "points": points,
        "records": {c: [asdict(r) for r in recs] for c, recs in records.items()},
        "warnings": _warnings(records, workload),
    }
    if server is not None:
        result["server_rss_bytes"] = max((p.get("server_rss_bytes", 0) for p in points), default=0)
        result["server_command"] = server.command
    return result


async def _sweep(url: str, model: str, prompts: list[list[int]], plan: list[tuple[int, int, int]],
                 output_tokens: int, server: VLLMServer | None, progress: Progress | None
                 ) -> tuple[list[dict[str, Any]], dict[int, list[RequestRecord]]]:
    total, done = len(prompts), 0

    def tick(_: RequestRecord) -> None:
        nonlocal done
        done += 1
        if progress:
            progress(done, total)

    points, records = [], {}
    offset = 0
    async with make_client(max(c for c, _, _ in plan)) as client:
        for c, warmup, n in plan:
            warm, measured = prompts[offset:offset + warmup], prompts[offset + warmup:offset + warmup + n]
            offset += warmup + n
            if warm:
                await run_closed_loop(url, model, warm, output_tokens, min(c, len(warm)), client=client,
                                      on_done=tick)
            rss = _PeakRss(server)
            sampler = asyncio.create_task(rss.run())
            t0 = time.perf_counter()
            recs = await run_closed_loop(url, model, measured, output_tokens, c, client=client, on_done=tick)
            wall = time.perf_counter() - t0
            sampler.cancel()
            point = {"concurrency": c, **summarize(recs, wall)}
            if server is not None:
                point["server_rss_bytes"] = rss.sample()
            points.append(point)
            records[c] = recs
    return points, records


class _PeakRss:
    """Peak resident memory of the server's process tree, sampled while a level runs."""

    def __init__(self, server: VLLMServer | None):
        self.server, self.peak = server, 0

    def sample(self) -> int:
        if self.server is not None:
            self.peak = max(self.peak, self.server.rss_bytes())
        return self.peak

    async def run(self) -> None:
        while self.server is not None:
            self.sample()
            await asyncio.sleep(RSS_SAMPLE_S)


def _warnings(records: dict[int, list[RequestRecord]], workload: Workload) -> list[str]:
    """Flag a workload that was not what it claims: the server counted other prompt/output lengths."""
    out = []
    for c, recs in records.items():
        ok = [r for r in recs if r.error is None]
        prompt = sorted({r.prompt_tokens for r in ok if r.prompt_tokens != workload.prompt_tokens},
                        key=str)
        output = sorted({r.output_tokens for r in ok if r.output_tokens != workload.output_tokens})
        if prompt:
            out.append(f"c={c}: server counted prompt_tokens {prompt}, asked {workload.prompt_tokens}")
        if output:
            out.append(f"c={c}: server returned {output} output tokens, asked {workload.output_tokens}")
    return out
