"""Checkpoints quantized ahead: while one variant is measured, the next variants' quantization runs in the
background, one at a time and in the sweep's order, so a variant's turn starts with its checkpoint ready.

Only where the engine runs on the CPU (a GPU engine holds most of the accelerator's memory, and a quantizer
beside it would not fit) and only for checkpoints built in a child process (`python -m quantize`). The builds
run at the lowest CPU priority, so they take what the measured variant leaves idle (an engine start is mostly
one core of imports) and barely slow its evals (each quantizer leads a session of its own at that priority:
where Linux groups processes by session, a niceness counts only within the session); a perf stage pauses them
(SIGSTOP, then SIGCONT), so no throughput or latency is measured beside a quantizer. A variant with a
sensitivity ranking (computed in this process) is quantized in its turn, as without this.

When a variant's turn comes before its build ahead has finished, the sweep waits on that build, which then runs
at the lowest priority while nothing of the sweep's needs the CPU: on a host where other users' processes run,
they would go first (a priority inversion). So the build waited on is raised back to the sweep's priority (its
thread, its quantizer's threads and the quantizer's own autogroup). Linux lets a process raise a priority only
with root, CAP_SYS_NICE or an RLIMIT_NICE that allows it (`ulimit -e`); where it may not, the build stays at
nice 19 and the log says so: on a busy shared host, set `execution.quantize_ahead: false`."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import psutil

from core.recipe import Variant
from perf.engines import lifeline
from perf.engines.process import renice_process
from perf.engines.vllm import DEFAULT_ENV
from quant.context import Checkpoint, SweepContext
from quant.quantize_stage import is_built
from quantize.child_process import QUANTIZER_ENV

LIFELINE = os.path.abspath(lifeline.__file__)
NICE = 19   # the background builds' priority: only CPU time nothing else wants
STARTING_S = 30.0   # how long a pause waits for a build that was just starting to show its quantizer


def wanted(ctx: SweepContext) -> bool:
    """The recipe's `execution.quantize_ahead`; unset: where the engine runs on the CPU and the memory free
    holds a quantizer (about three times the model) beside a served model and its KV cache."""
    setting = ctx.recipe.execution.quantize_ahead
    if setting is not None:
        return setting
    if (ctx.engine_facts or {}).get("device") != "cpu" or ctx.device != "cpu":
        return False
    weights, kv_cache = served_bytes(ctx)
    return psutil.virtual_memory().available > 4 * weights + kv_cache


def served_bytes(ctx: SweepContext) -> tuple[int, float]:
    """What serving the model on a CPU engine holds: its weights (the original model's files) and the KV cache."""
    weights = sum(p.stat().st_size for p in ctx.model_dir.rglob("*.safetensors"))
    return weights, float({**DEFAULT_ENV, **ctx.recipe.engine.env}["VLLM_CPU_KVCACHE_SPACE"]) * 2**30


def builds_ahead(variant: Variant) -> bool:
    return variant.quantized and not variant.checkpoint and not variant.sensitivity


def to_build_ahead(ctx: SweepContext, variants: list[Variant]) -> list[Variant]:
    """The variants after the first whose checkpoint can be built ahead and is not built yet; none where
    building ahead is not wanted."""
    later = [v for v in variants[1:] if builds_ahead(v) and not is_built(ctx, v)]
    return later if later and wanted(ctx) else []


class QuantizeAhead:
    """Builds the given variants' checkpoints (to_build_ahead's) in a background thread (each through `build(ctx, variant)`, the
    quantize stage); `checkpoint(variant)` hands one over (waiting for it if it is still being built)."""

    def __init__(self, ctx: SweepContext, variants: list[Variant], build: Callable[[SweepContext, Variant], Checkpoint]):
        self.ctx, self.build = ctx, build
        self.seconds: dict[str, float] = {}   # per variant: how long its background build took
        self._allowed = threading.Event()   # cleared while paused: no build starts
        self._allowed.set()
        self._building = threading.Event()   # a build is past that check: its quantizer runs or is starting
        self._gate = threading.Lock()   # that check and a pause's clearing, one at a time
        self._closing = False
        self._thread_id: int | None = None   # the background thread's (the builds' priority is set on it)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="quantize-ahead")
        self._futures: dict[str, Future] = {v.name: self._pool.submit(self._build, v) for v in variants}

    def _build(self, variant: Variant) -> Checkpoint:
        self._thread_id = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, self._thread_id, NICE)   # this thread; its children inherit it
        self._start_when_allowed()
        if self._closing:
            self._building.clear()
            raise RuntimeError("the sweep ended before this checkpoint was built")
        reporter = self.ctx.reporter.aside(variant.name)
        started = time.time()
        try:
            return self.build(dataclasses.replace(self.ctx, reporter=reporter), variant)
        finally:
            self.seconds[variant.name] = round(time.time() - started, 3)
            self._building.clear()

    def _start_when_allowed(self) -> None:
        while True:
            self._allowed.wait()
            with self._gate:
                if self._allowed.is_set():
                    self._building.set()
                    return

    def checkpoint(self, variant: Variant) -> Checkpoint:
        """The variant's checkpoint: built ahead (or being built: waited for), else built now. A build's
        StageError is raised here, in the variant's turn."""
        future = self._futures.pop(variant.name, None)
        if future is None:
            return self.build(self.ctx, variant)
        if not future.done():
            raised = self.raise_priority()
            self.ctx.reporter.log("  checkpoint: still being quantized ahead; waiting for it" + (
                " (raised to the sweep's priority)" if raised else
                f" (it runs at nice {NICE}: raising a priority needs root or RLIMIT_NICE, `ulimit -e`; on a busy "
                "shared host set execution.quantize_ahead: false)"))
        checkpoint = future.result()
        self.ctx.reporter.log(f"  checkpoint: ready ({self.seconds[variant.name]:.1f}s in the background)")
        return checkpoint

    def raise_priority(self) -> bool:
        """The builds from now on run at this process's priority: the background thread (a quantizer it starts
        inherits it) and every running quantizer, each thread and its autogroup. False where Linux refuses
        (no root, CAP_SYS_NICE or RLIMIT_NICE): they stay at NICE."""
        target = os.getpriority(os.PRIO_PROCESS, 0)
        try:
            if self._thread_id is not None:
                os.setpriority(os.PRIO_PROCESS, self._thread_id, target)
            for proc in quantizers():
                renice_process(proc, target)
                _autogroup_nice(proc.pid, target)
        except PermissionError:
            return False
        except (ProcessLookupError, psutil.Error):   # a build that ended meanwhile
            pass
        return True

    def built(self, variant: Variant) -> Checkpoint | None:
        """The variant's checkpoint once its background build has finished (waited for; it stays to be handed
        over by `checkpoint`); None where it is not built ahead or its build failed."""
        future = self._futures.get(variant.name)
        try:
            return future.result() if future else None
        except BaseException:   # noqa: BLE001 - a failed build is reported in the variant's own turn
            return None

    @contextmanager
    def paused(self) -> Iterator[None]:
        """No quantizer runs inside this block (a perf stage): a running one is stopped, none is started."""
        with self._gate:
            self._allowed.clear()
        stopped: dict[int, psutil.Process] = {}
        deadline = time.time() + STARTING_S
        while True:   # a build that is starting: until its quantizer shows (and is stopped) or the build ends
            stopped |= {p.pid: p for p in quantizers() if p.pid not in stopped and _quietly(p.suspend)}
            if stopped or not self._building.is_set() or time.time() > deadline:
                break
            time.sleep(0.05)
        try:
            yield
        finally:
            for proc in stopped.values():
                _quietly(proc.resume)
            self._allowed.set()

    def close(self) -> None:
        """On the sweep's way out (finished, failed or interrupted): nothing more is started, a running
        quantizer is stopped, and the background thread is waited for."""
        self._closing = True
        for future in self._futures.values():
            future.cancel()
        self._allowed.set()
        while self._building.is_set():   # a build that was starting its quantizer: stopped once it shows
            for proc in quantizers():
                _quietly(proc.resume)
                _quietly(proc.terminate)
            time.sleep(0.05)
        self._pool.shutdown(wait=True)


def quantizers() -> list[psutil.Process]:
    """This process's descendants started by the quantize stage (`python -m quantize` and whatever it started:
    they carry its environment marker); not the lifelines that watch them, which must stay able to stop them."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.environ().get(QUANTIZER_ENV) and LIFELINE not in proc.cmdline()[:4]:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _autogroup_nice(pid: int, nice: int) -> None:
    """A quantizer that leads its own autogroup (perf.engines.process.keep_low_priority_across_sessions) set the
    group's niceness too; only a session leader's is changed, or the sweep's own group would be."""
    if os.getsid(pid) == pid:
        try:
            Path(f"/proc/{pid}/autogroup").write_text(str(nice))
        except FileNotFoundError:   # no autogroup on this kernel
            pass


def _quietly(call: Callable[[], object]) -> bool:
    try:
        call()
        return True
    except psutil.Error:
        return False
