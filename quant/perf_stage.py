"""The perf stage of a sweep: each workload of the recipe against the variant's live server, cached by content
with its per-request records; and the memory columns (what fits on the deploy target), which need no server."""

from __future__ import annotations

import time
from contextlib import ExitStack, nullcontext
from pathlib import Path

from rich.markup import escape



from core.foreign_text import capped
from core.hashing import digest
from core.recipe import Variant
from core.recipe_perf import Workload
from core.store import copy_file
from perf.engines.dtypes import on_gpu
from perf.engines.kv_capacity import sequences_that_fit
from perf.engines.process import DEATH_WAIT_S
from perf.memory import account
from perf.requests import longest_request
from quant.context import Checkpoint, Session, SweepContext

STAGE_PERF = "perf"
DEFAULT_SEQ_TOKENS = 2048   # the memory columns' sequence length when the recipe has no workloads


def repeats(ctx: SweepContext, workload: Workload) -> int:
    """Runs of each of the workload's levels on this sweep's engine (the recipe's, else the device's default)."""
    return workload.repeats_on(on_gpu(ctx.engine_facts))


def perf_key(ctx: SweepContext, workload: Workload, ckpt_key: str, engine_args: dict) -> str:
    slo = ctx.recipe.perf.slo.bounds() if ctx.recipe.perf.slo else None
    shape = workload.model_dump(mode="json", exclude={"repeats"})
    runs = repeats(ctx, workload)
    if runs != 1:   # one run per level keeps the key it had before levels could be repeated
        shape["repeats"] = runs
    return digest("perf", ckpt_key, shape, ctx.engine_key, engine_args, slo, ctx.recipe.engine.engine_core_nice)


class PerfStage:
    """Every workload of the recipe on one served variant (`session.server`)."""
    name = "perf"

    def __init__(self, ctx: SweepContext, variant: Variant, checkpoint: Checkpoint, engine_args: dict):
        self.ctx, self.variant, self.checkpoint = ctx, variant, checkpoint
        self.keys = {w.name: perf_key(ctx, w, checkpoint.key, engine_args) for w in ctx.recipe.perf.workloads}
        self.todo = [w for w in ctx.recipe.perf.workloads if not ctx.cache.has(STAGE_PERF, self.keys[w.name])]
        self.lock_problem: str | None = None   # the perf lock could not be taken: this variant's perf fails

    def pending(self) -> bool:
        return bool(self.todo)

    def run(self, session: Session) -> None:
        """Under the perf lock of the recipe's perf isolation: variants measured side by side (the Ray
        executor, or two sweeps on one machine) never share what they measure. A lock that cannot be taken
        fails this variant's perf (with the reason), not the sweep."""
        from perf.isolation import PerfLockError, exclusive_perf

        ctx = self.ctx
        slo = ctx.recipe.perf.slo.bounds() if ctx.recipe.perf.slo else None

        def waiting(lock: str, holder: str) -> None:
            ctx.reporter.log(f"  perf: waiting for the {lock} perf lock (another variant is being measured there: "
                             f"held by {holder})")

        with ExitStack() as stack:
            try:
                where = stack.enter_context(exclusive_perf(ctx.recipe.execution.perf_isolation, on_wait=waiting))
            except PerfLockError as exc:
                self.lock_problem = str(exc)
                ctx.reporter.log(f"  perf not measured: {escape(str(exc))}", style="red")
                return
            stack.enter_context(ctx.ahead.paused() if ctx.ahead else nullcontext())
            stack.enter_context(ctx.starts.quiet() if ctx.starts else nullcontext())
            for workload in self.todo:
                with ctx.cache.building(STAGE_PERF, self.keys[workload.name]) as needed:
                    if needed:
                        self._measure(session, workload, where, slo)

    def _measure(self, session: Session, workload: Workload, where: dict, slo: dict | None) -> None:
        from perf.run import requests_in, run_workload   # the load generator: a cached stage never imports it

        ctx = self.ctx
        levels = workload.levels()
        label = f"{levels[0][0]} " + ", ".join(f"{level:g}" for _, level in levels)
        started = time.time()
        runs = repeats(ctx, workload)
        label += f"; {runs} repeats" if runs > 1 else ""
        with ctx.reporter.bar(f"  perf {workload.name} ({label})", requests_in(workload, runs)) as advance:
            served_name = self.variant.endpoint.model if self.variant.endpoint else self.variant.name
            result = run_workload(session.server, served_name, self.checkpoint.path, workload,
                                  progress=lambda done, _total: advance(1), slo=slo, repeats=runs)
        # a server that died under the level answered with errors: those are no measurement to keep
        failed = any(p["errors"] for p in result["points"])
        session.server.check_alive(wait_s=DEATH_WAIT_S if failed else 0.0)
        result["placement"] = {**where, "started": round(started, 3), "finished": round(time.time(), 3)}
        capacity = getattr(session.server, "kv_capacity", lambda: None)()
        if capacity:   # the engine's own KV capacity, at this workload's longest request
            result["kv_cache"] = sequences_that_fit(capacity, longest_request(workload))
            kv = result["kv_cache"]
            ctx.reporter.log(f"  KV cache (the engine's): {kv['kv_tokens']:,} tokens, {kv['max_sequences']:,} "
                             f"sequences of {kv['seq_tokens']:,} tokens at once")
        records = [{"level": level, **r} for level, rs in result.pop("records").items() for r in rs]
        ctx.cache.save_json(STAGE_PERF, self.keys[workload.name], result, extra={"records.jsonl": records})
        self._log(workload.name, result)

    def collect(self, record: dict) -> None:
        if self.lock_problem:
            record.update(status="failed", reason=f"perf: {self.lock_problem}")
        vdir = self.ctx.variant_dir(self.variant.name)
        for name, key in self.keys.items():
            if not self.ctx.cache.has(STAGE_PERF, key):   # not reached before the variant failed
                continue
            result = self.ctx.cache.load_json(STAGE_PERF, key)
            record["perf"][name] = result
            for memory in ("server_rss_bytes", "server_gpu_bytes"):
                if result.get(memory):
                    record["memory"][memory] = max(record["memory"].get(memory, 0), result[memory])
            if result.get("kv_cache") and "engine_kv_tokens" not in record["memory"]:
                record["memory"].update(engine_memory(result["kv_cache"], name))
            copy_file(self.ctx.cache.path(STAGE_PERF, key) / "records.jsonl", vdir / "perf" / f"{name}.jsonl")
            if unmeasured := unmeasured_levels(name, result):   # no figure, and the variant's record says so
                record.setdefault("not_measurable", {}).setdefault("perf", {}).update(unmeasured)

    def _log(self, name: str, result: dict) -> None:
        from perf.run import level_label

        log = self.ctx.reporter.log
        for p in result["points"]:
            if p["errors"] == p["n"]:
                log(f"  {name} {level_label(p)}: every request failed: {escape(str(p.get('first_error')))}",
                    style="red")
                continue
            log(f"  {name} {level_label(p)}: {p['output_tokens_per_s']:.0f} out tok/s, "
                f"{p['requests_per_s']:.1f} req/s, TTFT p99 {p['ttft_ms']['p99']:.0f} ms, "
                f"TPOT p99 {p['tpot_ms']['p99']:.1f} ms, errors {p['errors']}"
                + (f", SLO met by {p['slo_attainment']:.0%} (goodput {p['goodput_rps']:.1f} req/s)"
                   if "slo_attainment" in p else ""))


def unmeasured_levels(workload: str, result: dict) -> dict[str, str]:
    """{"<workload> c=16": "every request failed (HTTP 503: ...)"} for each level of a workload's result where
    no request succeeded: listed under the variant's not_measurable, its perf figures absent."""
    return {f"{workload} {_level(p)}": f"every request failed ({capped(p.get('first_error') or '?', 300)})"
            for p in result.get("points", []) if p.get("n") and p.get("errors") == p["n"]}


def _level(point: dict) -> str:
    """perf.run.level_label's words (c=8, rate=2/s, trace x1; #2 for a repeat) without importing the load
    generator: a cached stage never does."""
    again = f" #{point['repeat'] + 1}" if point.get("repeat") else ""
    if point.get("concurrency") is not None:
        return f"c={point['concurrency']}{again}"
    if point.get("rate") is not None:
        return f"rate={point['rate']:g}/s{again}"
    return f"trace x{point.get('trace') or 1:g}{again}"


def engine_memory(kv_cache: dict, workload: str) -> dict:
    """The memory columns the engine measured: its KV cache in tokens (and bytes per token where it logged the
    memory) and the sequences of the first workload's longest request that fit in it at once."""
    measured = {"engine_kv_tokens": kv_cache["kv_tokens"],
                "engine_kv_bytes_per_token": kv_cache.get("kv_bytes_per_token"), "engine_kv_gib": kv_cache.get("kv_gib"),
                "engine_weights_gib": kv_cache.get("weights_gib"), "engine_ranks": kv_cache.get("ranks"),
                "engine_max_sequences": kv_cache["max_sequences"], "engine_seq_tokens": kv_cache["seq_tokens"],
                "engine_seq_from": f"longest request of workload {workload}"}
    return {k: v for k, v in measured.items() if v is not None}


def memory_columns(ctx: SweepContext, variant: Variant, checkpoint: Path, weights_bytes: int) -> dict:
    """Weights, KV bytes per token and sequences that fit, for sequences as long as the first workload's
    longest request."""
    perf = ctx.recipe.perf
    first = perf.workloads[0] if perf.workloads else None
    engine_args = {**ctx.recipe.engine.args, **variant.served_args}
    try:
        seq = longest_request(first) if first else DEFAULT_SEQ_TOKENS
        memory = account(checkpoint, weights_bytes, engine_args, seq, perf.accelerator_memory_gib,
                         perf.memory_utilization, ctx.served_dtype)
    except (OSError, KeyError, ValueError):
        return {"weights_bytes": weights_bytes}
    return {**memory, "seq_from": f"longest request of workload {first.name}" if first else "default (no workloads)"}
