"""Where a variant is measured: through the engine (the eval, KL and perf stages on one live server) or, when
the engine cannot serve it, in-process with transformers (eval and KL only). A server or model is loaded only
when some stage has uncached work; every stage then copies its cached results into the variant's record."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Protocol

from rich.markup import escape

from core.hashing import digest
from core.recipe import Variant
from core.store import write_jsonl
from perf.engines import ENGINES, EngineDiedError, EngineStartError
from perf.engines.known_unsupported import known_refusal
from perf.engines.process import DEATH_WAIT_S
from perf.engines.start_failure import CHECKPOINT, RECIPE
from quant.context import Checkpoint, Session, StageError, SweepContext
from quant.eval_stage import EvalStage
from quant.inprocess_plan import CPU_LIMIT_S, cpu_estimate, inprocess_device
from quant.kl_stage import KlStage
from quant.perf_stage import PerfStage
from quant.timing import timed

STAGE_SERVE_FAILURES = "serve-failures"


class Stage(Protocol):
    """A measuring stage of one variant (eval_stage, kl_stage, perf_stage): whether it has uncached work, that
    work through a session, and its cached results copied into the variant's record."""

    name: str   # its entry in the variant's per-stage wall times (quant/timing.py)

    def pending(self) -> bool: ...
    def run(self, session: Session) -> None: ...
    def collect(self, record: dict) -> None: ...


def measure_variant(ctx: SweepContext, variant: Variant, checkpoint: Checkpoint, record: dict) -> None:
    """Accuracy (and KL) per task and perf per workload into `record`; served, else in-process where the engine
    refuses the checkpoint. An engine that does not start for another reason fails the variant; where its output
    blames the recipe's engine arguments or environment, the record says so (`engine_refused_recipe`) and the
    sweep ends on it (exit 2)."""
    reason = _refusal(ctx, variant, checkpoint, log=ctx.reporter.log)
    if reason is None:
        try:
            refused = _measure_served_restarting(ctx, variant, checkpoint, record)
        except EngineDiedError as exc:
            record.update(status="failed", reason=f"{exc} (after one restart)")
            return
        if refused and refused.blames != CHECKPOINT:
            _start_failed(record, refused)
            return
        if refused:
            reason = refused.reason
            ctx.cache.save_json(STAGE_SERVE_FAILURES, _serve_failure_key(ctx, variant, checkpoint),
                                {"reason": reason, "blames": CHECKPOINT})
    if reason and variant.kv_cache_dtype:   # transformers would measure the model's own KV cache, not this one
        record.update(status="unsupported", reason=f"engine: {reason}; not measured in-process: its "
                      f"kv_cache_dtype {variant.kv_cache_dtype} is the engine's", served=False)
        return
    if reason:
        record.update(status="unsupported", reason=f"engine: {reason}", served=False, eval_backend="inprocess")
        try:
            _measure_inprocess(ctx, variant, checkpoint, record)
        except StageError as exc:
            record.update(status="failed", reason=f"{record['reason']}; in-process eval: {exc}")
    else:
        record.update(served=True, eval_backend="served")
    write_jsonl(ctx.variant_dir(variant.name) / "accuracy.jsonl",
                [{"task": t, **a} for t, a in record["accuracy"].items()])


def _start_failed(record: dict, refused: EngineStartError) -> None:
    if refused.blames == RECIPE:
        record.update(status="failed", engine_refused_recipe=True,
                      reason=f"the engine refused to start with the recipe's engine arguments or environment: {refused}")
    else:
        record.update(status="failed", reason=f"the engine did not start: {refused}")


def _serve_failure_key(ctx: SweepContext, variant: Variant, checkpoint: Checkpoint) -> str:
    return digest("serve-failure", checkpoint.key, ctx.engine_key, variant.served_args)


def _refusal(ctx: SweepContext, variant: Variant, checkpoint: Checkpoint, log: Callable[[str], None]) -> str | None:
    """Why the engine will not serve this variant, known without starting it (from its kernels, or from a
    refusal cached by an earlier run); None where it is to be started."""
    if ctx.retry_failed:
        return None
    if reason := known_refusal(ctx.engine_facts, checkpoint.path):
        log(f"  the engine is known to refuse this variant; not started: {escape(reason)}")
        return reason
    if ctx.cache.has(STAGE_SERVE_FAILURES, key := _serve_failure_key(ctx, variant, checkpoint)):
        reason = ctx.cache.load_json(STAGE_SERVE_FAILURES, key)["reason"]
        log(f"  engine rejected this variant before (cached): {escape(reason)}")
        return reason
    return None


def _engine(ctx: SweepContext, variant: Variant, checkpoint: Checkpoint, engine_args: dict):
    return ENGINES[ctx.recipe.engine.kind](
        checkpoint.path, python=ctx.engine_python, served_name=variant.name, args=engine_args,
        env=ctx.recipe.engine.env, startup_timeout_s=ctx.recipe.engine.startup_timeout_s,
        log_path=ctx.variant_dir(variant.name) / "server.log", dtype=ctx.served_dtype,
        engine_core_nice=_engine_core_nice(ctx), device=(ctx.engine_facts or {}).get("device"))


def _engine_core_nice(ctx: SweepContext) -> int | None:
    """The recipe's engine_core_nice on a CPU engine only: on a GPU the engine core drives the kernels, and
    lowering its priority would slow the variant it measures."""
    return ctx.recipe.engine.engine_core_nice if (ctx.engine_facts or {}).get("device") == "cpu" else None


def _served_stages(ctx: SweepContext, variant: Variant, checkpoint: Checkpoint) -> tuple[dict, EvalStage, PerfStage]:
    """The engine flags of a served variant, and its eval and perf stages."""
    engine_args = {**ctx.recipe.engine.args, **variant.served_args}
    return (engine_args, EvalStage(ctx, variant, checkpoint, "served", engine_args),
            PerfStage(ctx, variant, checkpoint, engine_args))


def engine_to_start_ahead(ctx: SweepContext, variant: Variant, checkpoint: Checkpoint):
    """The (not yet started) server this variant's turn would start: where the engine is not known to refuse
    it and its evals or perf have uncached work; else None (quant/start_ahead.py)."""
    if _refusal(ctx, variant, checkpoint, log=lambda _line: None):
        return None
    engine_args, evals, perf = _served_stages(ctx, variant, checkpoint)
    if not (evals.pending() or perf.pending()):
        return None
    return _engine(ctx, variant, checkpoint, engine_args)


def run_stages(stages: list[Stage], session: Callable[[], AbstractContextManager[Session]], record: dict) -> bool:
    """Runs the stages' uncached work in one session (opened only if there is any), then collects every stage.
    Returns whether a session was opened."""
    opened = any(stage.pending() for stage in stages)
    if opened:
        with session() as live:
            for stage in stages:
                with timed(record, stage.name):
                    stage.run(live)
    for stage in stages:
        stage.collect(record)
    return opened


def _measure_served_restarting(ctx: SweepContext, variant: Variant, checkpoint: Checkpoint,
                               record: dict) -> EngineStartError | None:
    """_measure_served, once more on a fresh server when the first died while serving (what finished before is
    cached and not redone); a second death is raised. Each death is kept in the record's engine_deaths."""
    try:
        return _measure_served(ctx, variant, checkpoint, record)
    except EngineDiedError as exc:
        record.setdefault("engine_deaths", []).append(str(exc))
        ctx.reporter.log(f"  {escape(str(exc))}; restarting it once", style="red")
    try:
        return _measure_served(ctx, variant, checkpoint, record)
    except EngineDiedError as exc:
        record["engine_deaths"].append(str(exc))
        raise


def _measure_served(ctx: SweepContext, variant: Variant, checkpoint: Checkpoint,
                    record: dict) -> EngineStartError | None:
    """Returns why the engine did not start, if it did not; EngineDiedError if the server died while serving (the
    stage it was running is not cached)."""
    engine_args, evals, perf = _served_stages(ctx, variant, checkpoint)
    stages = [evals, KlStage(ctx, variant, evals.keys), perf]
    engine = _engine(ctx, variant, checkpoint, engine_args)

    @contextmanager
    def served() -> Iterator[Session]:
        from evals.backends.served import RequestRejected, ServedLM   # lm-eval: only when a stage has work

        started = time.time()
        with ExitStack() as stack:
            with timed(record, "engine_start"):
                ahead = ctx.starts.take(variant, checkpoint.path) if ctx.starts else None
                if not ahead:
                    ctx.reporter.log(f"  starting {ctx.recipe.engine.kind} on 127.0.0.1 …")
                    server = stack.enter_context(engine)
            if ahead:
                server = ahead.server
                stack.callback(server.stop)
                record["ran_on"]["stages"]["engine_start_ahead"] = ahead.seconds
                ctx.reporter.log(f"  server ready: started ahead in {ahead.seconds:.0f}s (pid {server.pid})")
            else:
                ctx.reporter.log(f"  server ready in {time.time() - started:.0f}s (pid {server.pid})")
            if ctx.starts:
                ctx.starts.begin_after(variant)
            try:
                yield Session(ServedLM(server.completions_url, variant.name, tokenizer_dir=checkpoint.path,
                                       concurrency=ctx.recipe.eval_concurrency), server)
            except (EngineDiedError, RequestRejected):   # the latter was answered: the server was alive
                raise
            except Exception as exc:   # a stage failed: because the server died under it?
                server.check_alive(wait_s=DEATH_WAIT_S)
                raise exc

    try:
        if not run_stages(stages, served, record):
            ctx.reporter.log("  evals and perf: cached")
    except EngineStartError as exc:
        return exc
    record["serve_command"] = engine.deploy_command   # the same whether this run started a server or not
    return None


def _measure_inprocess(ctx: SweepContext, variant: Variant, checkpoint: Checkpoint, record: dict) -> None:
    """Eval and KL in transformers on the sweep's device. Where that is the CPU and the estimate says it would
    take longer than CPU_LIMIT_S, nothing is scored unless the user opted in (the record says which)."""
    evals = EvalStage(ctx, variant, checkpoint, "inprocess")
    stages = [evals, KlStage(ctx, variant, evals.keys)]
    device = record["inprocess_device"] = ctx.device
    if any(stage.pending() for stage in stages):
        device = inprocess_device(ctx.device)
        if device == "cpu":
            estimate = cpu_estimate(ctx.model_dir, [t for t in ctx.recipe.tasks if t in evals.todo])
            if estimate.seconds > CPU_LIMIT_S and not ctx.allow_long_cpu_eval:
                ctx.reporter.log(f"  not scored in-process: on the CPU it would take {estimate.describe()}; "
                                 "--allow-long-cpu-eval scores it anyway", style="yellow")
                record.update(eval_backend=None, inprocess_cpu_estimate=estimate.as_record(),
                              reason=f"{record['reason']}; not scored: in-process on the CPU it would take "
                                     f"{estimate.describe()} (--allow-long-cpu-eval scores it)")
                return
            ctx.reporter.log(f"  in-process on the CPU: {estimate.describe()}")
    ctx.reporter.log(f"  measuring accuracy in-process (transformers, {device}) instead; no perf numbers")

    @contextmanager
    def in_process() -> Iterator[Session]:
        from core.child import ChildError
        from evals.backends.inprocess_child import ChildLM   # lm-eval: only when a stage has work

        try:   # the model lives in a child process: its memory is returned when the session closes
            with timed(record, "model_load"):
                lm = ChildLM(checkpoint.path, dtype=ctx.inprocess_dtype, device=device)
        except ChildError as exc:   # any loader failure is this variant's reason
            raise StageError(str(exc)[:250]) from None
        with lm:
            yield Session(lm)

    run_stages(stages, in_process, record)
