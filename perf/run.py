"""Run one workload (its levels: concurrencies, request rates or a trace) against a served model."""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

from perf.budget import Budget
from perf.engines.vllm import VLLMServer
from perf.engines.gpus import visible_gpus
from perf.host_load import gpu_foreign_processes, host_load, read_cpu
from perf.loadgen import RequestRecord, make_client, no_gc_pauses, run_closed_loop, run_open_loop
from perf.metrics import summarize
from perf.prompts import PromptMaker
from perf.repeats import summarise_levels
from perf.requests import plan_level, requests_per_level
from perf.server_metrics import crosscheck, prefix_cache_note, read_counters
from core.recipe_perf import Workload

Progress = Callable[[int, int], None]   # (done, total), warm-up requests included
RSS_SAMPLE_S = 0.5
OPEN_LOOP_CONNECTIONS = 256
EXTRA_BATCH = 1000       # a level's extra requests (min_seconds) draw as repeat + 1000 x batch: no repeat's prompts
WARMUP_CONCURRENCY = 4   # warm-up streams at once for rate and trace levels (a concurrency level uses its own)


def arrived_in_one_burst(span_s: float, chunks: int) -> bool:
    """A streamed response whose token-bearing chunks (first to last within span_s) came faster than
    0.1 ms apiece arrived in one burst: real decoding takes at least a millisecond per step, and at 8
    chunks or more that is not chance."""
    return chunks >= 8 and span_s < 1e-4 * chunks


def level_label(point: dict) -> str:
    """c=8, rate=2/s or trace x1; a repeat after the first adds its number (c=8 #2)."""
    again = f" #{point['repeat'] + 1}" if point.get("repeat") else ""
    if "concurrency" in point:
        return f"c={point['concurrency']}{again}"
    if "rate" in point:
        return f"rate={point['rate']:g}/s{again}"
    return f"trace x{point['trace']:g}{again}"


def requests_in(workload: Workload, repeats: int = 1) -> int:
    """Requests a workload sends, warm-ups included (for progress bars; bursts and traces add a few)."""
    levels = workload.levels()
    if workload.rate_search:
        levels += [("rate", workload.rate_search.high)] * workload.rate_search.probes
    return repeats * sum(requests_per_level(workload, kind, level) + workload.warmup_requests
                         for kind, level in levels)


def completions_url(server_or_url: VLLMServer | str) -> str:
    if not isinstance(server_or_url, str):
        return server_or_url.completions_url
    url = server_or_url.rstrip("/")
    return url if url.endswith("/v1/completions") else url + "/v1/completions"


def run_workload(server_or_url: VLLMServer | str, model_name: str, tokenizer_path: str | Path,
                 workload: Workload, progress: Progress | None = None, seed: int = 0,
                 slo: dict[str, float] | None = None, repeats: int | None = None) -> dict[str, Any]:
    """For each level (a concurrency, a request rate, or a trace's speed-up; or the rates a rate search
    probes), `repeats` times (default: the workload's, else 1): warm-up requests (discarded), then the
    measured requests. Every request gets fresh random token ids (seeded by level and repeat,
    perf/requests.py `level_seed`), so only a workload's shared prefix, if it has one, can be served from the
    prefix cache. A workload's min_seconds/max_seconds bound each level's measured time (perf/budget.py).
    `levels` holds each level's median and interval over its repeats (perf/repeats.py)."""
    server = None if isinstance(server_or_url, str) else server_or_url
    run = _Run(completions_url(server_or_url), model_name, PromptMaker(tokenizer_path), workload, server,
               progress, slo, seed, repeats or workload.repeats or 1)
    asyncio.run(run.all_levels())
    result: dict[str, Any] = {
        "workload": workload.name,
        "prompt_tokens": _describe_lengths(workload.prompt_tokens),
        "output_tokens": _describe_lengths(workload.output_tokens),
        "arrival": workload.arrival if not workload.trace else "trace",
        "points": run.points,
        "levels": summarise_levels(run.points, run.records, [level_label(p) for p in run.points]),
        "records": run.records,
        "warnings": run.warnings,
    }
    if workload.rate_search:
        result["max_rate_meeting_slo"] = run.best_rate
    if server is not None:
        result["server_rss_bytes"] = max((p.get("server_rss_bytes", 0) for p in run.points), default=0)
        gpu = max((p.get("server_gpu_bytes", 0) for p in run.points), default=0)
        if gpu:
            result["server_gpu_bytes"] = gpu
        result["server_command"] = server.command
        result["engine_core_nice"] = server.engine_core_niced
    return result


def _describe_lengths(spec) -> int | dict:
    return spec if isinstance(spec, int) else spec.model_dump(exclude_none=True)


class _Run:
    """One workload against one server: its levels in order, or a rate search."""

    def __init__(self, url: str, model: str, maker: PromptMaker, workload: Workload, server: VLLMServer | None,
                 progress: Progress | None, slo: dict[str, float] | None, seed: int, repeats: int = 1):
        self.url, self.model, self.maker, self.workload, self.server = url, model, maker, workload, server
        self.progress, self.slo, self.seed, self.repeats = progress, slo, seed, repeats
        self.runs_of: dict[tuple[str, float], int] = {}   # runs so far per level: the next run's repeat number
        self.base_url = url.removesuffix("/v1/completions")
        self.points: list[dict[str, Any]] = []
        self.records: dict[str, list[dict]] = {}
        self.warnings: list[str] = []
        self.best_rate: float | None = None
        self.done, self.total = 0, requests_in(workload, repeats)
        self.settings = server.settings() if hasattr(server, "settings") else None   # as the engine resolved them

    def as_sent(self, ids: list[int]) -> list[int] | str:
        """Token ids, or their text where the server takes no token-id prompts (an endpoint's probe says)."""
        return self.maker.text(ids) if getattr(self.server, "text_prompts", False) else ids

    def tick(self, _: RequestRecord) -> None:
        self.done += 1
        self.total = max(self.total, self.done)
        if self.progress:
            self.progress(self.done, self.total)

    async def all_levels(self) -> None:
        w = self.workload
        # connections: a closed loop never has more in flight than its top level; an open loop is uncapped
        in_flight = max(c for _, c in w.levels()) if not w.open_loop else (w.max_concurrency or OPEN_LOOP_CONNECTIONS)
        async with make_client(int(in_flight), headers=getattr(self.server, "headers", None),
                               url=self.base_url) as self.client:
            if w.rate_search:
                await self.search(w.rate_search)
            else:
                for kind, level in w.levels():
                    for _ in range(self.repeats):
                        await self.level(kind, level)

    async def search(self, search) -> None:
        """Highest rate with SLO attainment >= search.attainment, to within the last bisection step."""
        meets = lambda point: (point.get("slo_attainment") or 0.0) >= search.attainment
        low, high = search.low, search.high
        if not meets(await self.level("rate", low)):
            return
        self.best_rate = low
        if meets(await self.level("rate", high)):
            self.best_rate = high
            return
        for _ in range(search.probes):
            mid = math.sqrt(low * high)
            if meets(await self.level("rate", mid)):
                low = self.best_rate = mid
            else:
                high = mid

    async def level(self, kind: str, level: float) -> dict[str, Any]:
        w, url, model, client = self.workload, self.url, self.model, self.client
        repeat = self.runs_of.get((kind, level), 0)   # a level listed twice is a repeat too: fresh prompts
        self.runs_of[(kind, level)] = repeat + 1
        plan = plan_level(w, kind, level, self.maker, self.seed, repeat=repeat)
        planned_n = len(plan)
        if kind != "concurrency" and w.max_seconds is not None:   # an open loop: the arrivals within the budget
            plan = [p for p in plan if p.offset_s <= w.max_seconds] or plan[:1]
        warm = plan_level(w, kind, level, self.maker, self.seed + 1, limit=w.warmup_requests, repeat=repeat)
        if warm:
            streams = int(level) if kind == "concurrency" else WARMUP_CONCURRENCY
            await run_closed_loop(url, model, [self.as_sent(r.prompt) for r in warm],
                                  [r.output_tokens for r in warm],
                                  min(streams, len(warm)), client=client, on_done=self.tick)
        rss = _PeakRss(self.server)
        sampler = asyncio.create_task(rss.run())
        prompts, outputs = [self.as_sent(r.prompt) for r in plan], [r.output_tokens for r in plan]
        started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        gpu_foreign = self.gpu_foreign()
        with no_gc_pauses():
            before = await read_counters(client, self.base_url)
            cpu_before = read_cpu()
            t0 = time.perf_counter()
            if kind == "concurrency":
                budget = Budget(w.min_seconds, w.max_seconds, self.more_requests(kind, level, repeat, plan))
                recs = await run_closed_loop(url, model, prompts, outputs, int(level), client=client,
                                             on_done=self.tick, budget=budget)
            else:
                recs = await run_open_loop(url, model, prompts, outputs, [r.offset_s for r in plan],
                                           max_concurrency=w.max_concurrency, client=client, on_done=self.tick)
            wall = time.perf_counter() - t0
            cpu_after = read_cpu()
            after = await read_counters(client, self.base_url)
        sampler.cancel()
        for rec, planned in zip(recs, plan):
            rec.kind = planned.kind
        point = {kind: int(level) if kind == "concurrency" else level, **({"repeat": repeat} if repeat else {}),
                 "started": started, **summarize(recs, wall, self.slo)}
        if kind != "concurrency":
            span = plan[-1].offset_s - plan[0].offset_s
            point["offered_rps"] = (len(plan) - 1) / span if span > 0 else None
        ok = [r for r in recs if r.error is None]
        if gpu_foreign is not None:
            gpu_foreign = _distinct(gpu_foreign + self.gpu_foreign())
        point["host_load"] = host_load(cpu_before, cpu_after, gpu_foreign=gpu_foreign)
        point["server_check"] = crosscheck(before, after, sum(r.output_tokens for r in ok),
                                           sum(r.prompt_tokens or 0 for r in ok))
        if self.settings:
            point["engine_settings"] = self.settings
        cached = prefix_cache_note(point["server_check"], w.shared_prefix is not None)
        if self.server is not None:
            point["server_rss_bytes"] = rss.sample()
            gpu = self.server.gpu_bytes()
            if gpu:
                point["server_gpu_bytes"] = gpu
        label = level_label(point)
        self.points.append(point)
        self.records[label] = [asdict(r) for r in recs]
        self.warnings += _warnings(label, self.records[label], plan, point)
        if w.max_seconds is not None and len(recs) < planned_n:
            self.warnings.append(f"{label}: stopped at max_seconds {w.max_seconds:g}: {len(recs)} of {planned_n} "
                                 "planned requests sent")
        if cached:
            point["prefix_cache_warm"] = True
            self.warnings.append(f"{label}: {cached}")
        return point

    def more_requests(self, kind: str, level: float, repeat: int, plan: list):
        """Fresh requests beyond the planned ones, for a level that must run min_seconds: batches planned as
        runs no repeat uses (perf/requests.py `level_seed`), appended to `plan` as they are sent."""
        batches = iter(range(1, 10**6))
        queue: list = []

        def more() -> tuple[list[int] | str, int]:
            if not queue:
                queue.extend(plan_level(self.workload, kind, level, self.maker, self.seed,
                                        repeat=repeat + EXTRA_BATCH * next(batches)))
            planned = queue.pop(0)
            plan.append(planned)
            self.total += 1
            return self.as_sent(planned.prompt), planned.output_tokens
        return more

    def gpu_foreign(self) -> list[dict] | None:
        """On a GPU engine, other processes on the variant's GPUs now (perf/host_load.py); None on a CPU engine."""
        if self.server is None or getattr(self.server, "device", None) in (None, "cpu"):
            return None
        return gpu_foreign_processes(variant_gpu_uuids(), own_bytes=self.server.gpu_bytes())


def variant_gpu_uuids() -> list[str]:
    """The GPUs the served variant may use: those CUDA_VISIBLE_DEVICES leaves it ([]: unknown, every GPU); a MIG
    instance as its GPU (nvidia-smi lists processes by the GPU's UUID)."""
    return [gpu.parent or gpu.uuid for gpu in visible_gpus()] if os.environ.get("CUDA_VISIBLE_DEVICES") else []


def _distinct(processes: list[dict]) -> list[dict]:
    return list({(p["pid"], p["gpu_uuid"]): p for p in processes}.values())


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


def _warnings(label: str, records: list[dict], plan: list, point: dict) -> list[str]:
    """Flag a level that was not what it claims: the server counted other prompt/output lengths than
    planned, responses came in one burst instead of token by token, or the server's own counters disagree
    with what the client received."""
    out = []
    ok = [(r, p) for r, p in zip(records, plan) if r["error"] is None]
    prompt = sum(r["prompt_tokens"] is not None and r["prompt_tokens"] != len(p.prompt) for r, p in ok)
    output = sum(r["output_tokens"] != p.output_tokens for r, p in ok)
    if prompt:
        out.append(f"{label}: the server counted another prompt length than planned for {prompt} requests")
    if output:
        out.append(f"{label}: {output} requests returned another number of output tokens than asked")
    bursts = sum(arrived_in_one_burst(r["e2e_s"] - r["ttft_s"], r["chunks"]) for r, _ in ok)
    if bursts:
        out.append(f"{label}: {bursts} of {len(ok)} streamed responses arrived in one burst: the client was not "
                   "scheduled while the server streamed them, or something buffered the stream; their TTFT reads "
                   "late and their TPOT/ITL near zero")
    load = point.get("host_load")
    if load and load["foreign_load"]:
        out.append(f"{label}: measured under foreign load: other processes took {load['foreign_cores']:.2f} cores "
                   f"on average (flagged from {load['limit_cores']:g}; load average {load['loadavg_1m']:.2f} on "
                   f"{load['cpus']} CPUs): these numbers may be the machine's, not the variant's")
    check = point.get("server_check")
    if check and not check["match"]:
        out.append(f"{label}: server generated {check['server_output_tokens']} tokens, "
                   f"client received {check['client_output_tokens']}")
    return out
