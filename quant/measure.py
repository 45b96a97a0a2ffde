"""Measure one variant: accuracy per task and perf per workload, through the engine or in-process."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from evals.runner import evaluate_task
from quant import kl_stage
from core.store import copy_file

STAGE_EVAL, STAGE_PERF = "evals", "perf"
LM_EVAL = "lm_eval"   # lm-eval's own output files, in the eval stage and in each variant's directory


def _collect_eval(ctx, key: str, task: str, record: dict, vdir: Path, backend: str) -> None:
    summary = ctx.cache.load_json(STAGE_EVAL, key)
    primary = summary["primary"]
    record["accuracy"][task] = {"metric": primary, **summary[primary], "backend": backend,
                                "metrics": {m: v for m, v in summary.items() if m != "primary"}}
    copy_file(ctx.cache.path(STAGE_EVAL, key) / "samples.jsonl", vdir / "evals" / f"{task}.jsonl")
    _collect_lm_eval(ctx.cache.path(STAGE_EVAL, key) / LM_EVAL, vdir)


def _collect_lm_eval(cached: Path, vdir: Path) -> None:
    """lm-eval's layout, output_path/<model_name_sanitized>/, so its tooling reads variants/<v>/lm_eval."""
    from lm_eval.utils import sanitize_model_name

    for src in sorted(cached.glob("*")) if cached.is_dir() else []:
        copy_file(src, vdir / LM_EVAL / sanitize_model_name(vdir.name) / src.name)


def _collect_perf(ctx, key: str, name: str, record: dict, vdir: Path) -> None:
    result = ctx.cache.load_json(STAGE_PERF, key)
    record["perf"][name] = result
    for memory in ("server_rss_bytes", "server_gpu_bytes"):
        if result.get(memory):
            record["memory"][memory] = max(record["memory"].get(memory, 0), result[memory])
    copy_file(ctx.cache.path(STAGE_PERF, key) / "records.jsonl", vdir / "perf" / f"{name}.jsonl")


def _run_eval(ctx, lm, task, key: str, model_name: str) -> None:
    size = _task_size(task.name)
    total = size if task.limit is None else min(task.limit, size or task.limit)
    with ctx.reporter.bar(f"  eval {task.key}", total=total) as advance:
        if hasattr(lm, "progress"):
            lm.progress = advance
        started = time.time()
        with tempfile.TemporaryDirectory(prefix="quant-lm-eval-") as scratch:
            summary, samples = evaluate_task(lm, task, lm_eval_dir=Path(scratch), model_name=model_name)
            summary["eval_seconds"] = round(time.time() - started, 2)
            lm_eval_files = {f"{LM_EVAL}/{path.name}": path for path in Path(scratch).glob("*/*")}
            ctx.cache.save_json(STAGE_EVAL, key, summary, extra={"samples.jsonl": samples}, files=lm_eval_files)
    primary = summary["primary"]
    ctx.reporter.log(f"  {task.key}: {primary} {summary[primary]['value']:.3f} "
                     f"(n={summary[primary]['n']}, {summary['eval_seconds']:.1f}s)")


def measure_served(ctx, variant, checkpoint: Path, ckpt_key: str, record: dict, vdir: Path) -> str | None:
    """Evals and perf through a live server. Returns the engine's reason if it cannot serve the variant."""
    from evals.backends.served import ServedLM
    from perf.engines import ENGINES, EngineStartError
    from quant.sweep import perf_key, task_key

    engine_args = {**ctx.recipe.engine.args, **variant.engine_args}
    eval_keys = {t.key: task_key(ctx, t, ckpt_key, "served", engine_args) for t in ctx.recipe.tasks}
    perf_keys = {w.name: perf_key(ctx, w, ckpt_key, engine_args) for w in ctx.recipe.perf.workloads}
    slo = ctx.recipe.perf.slo.bounds() if ctx.recipe.perf.slo else None
    todo_tasks = [t for t in ctx.recipe.tasks if not ctx.cache.has(STAGE_EVAL, eval_keys[t.key])]
    todo_perf = [w for w in ctx.recipe.perf.workloads if not ctx.cache.has(STAGE_PERF, perf_keys[w.name])]
    todo_kl = kl_stage.todo(ctx, variant, eval_keys)
    engine = ENGINES[ctx.recipe.engine.kind](
        checkpoint, python=ctx.engine_python, served_name=variant.name, args=engine_args,
        env=ctx.recipe.engine.env, startup_timeout_s=ctx.recipe.engine.startup_timeout_s,
        log_path=vdir / "server.log", dtype=ctx.recipe.engine.dtype,
        engine_core_nice=ctx.recipe.engine.engine_core_nice)
    if todo_tasks or todo_perf or todo_kl:
        ctx.reporter.log(f"  starting {ctx.recipe.engine.kind} on 127.0.0.1 …")
        started = time.time()
        try:
            with engine as server:
                ctx.reporter.log(f"  server ready in {time.time() - started:.0f}s (pid {server.pid})")
                lm = ServedLM(server.completions_url, variant.name, tokenizer_dir=checkpoint,
                              concurrency=ctx.recipe.eval_concurrency)
                for task in todo_tasks:
                    _run_eval(ctx, lm, task, eval_keys[task.key], variant.name)
                kl_stage.run(ctx, variant, lm, todo_kl, eval_keys)
                if todo_perf:
                    _run_perf(ctx, server, variant, checkpoint, todo_perf, perf_keys, slo)
        except EngineStartError as exc:
            return exc.reason
    else:
        ctx.reporter.log("  evals and perf: cached")
    for name, key in eval_keys.items():
        _collect_eval(ctx, key, name, record, vdir, "served")
    kl_stage.collect(ctx, variant, eval_keys, record)
    for name, key in perf_keys.items():
        _collect_perf(ctx, key, name, record, vdir)
    record["serve_command"] = engine.deploy_command   # the same whether this run started a server or not
    return None


def _run_perf(ctx, server, variant, checkpoint: Path, workloads: list, perf_keys: dict[str, str], slo) -> None:
    from perf.isolation import exclusive_perf
    from perf.run import requests_in, run_workload

    def waiting(lock: str) -> None:
        ctx.reporter.log(f"  perf: waiting for the {lock} perf lock (another variant is being measured there)")

    with exclusive_perf(ctx.recipe.execution.perf_isolation, on_wait=waiting) as where:
        for workload in workloads:
            levels = workload.levels()
            label = f"{levels[0][0]} " + ", ".join(f"{level:g}" for _, level in levels)
            started = time.time()
            with ctx.reporter.bar(f"  perf {workload.name} ({label})", requests_in(workload)) as advance:
                result = run_workload(server, variant.name, checkpoint, workload,
                                      progress=lambda done, _total: advance(1), slo=slo)
            result["placement"] = {**where, "started": round(started, 3), "finished": round(time.time(), 3)}
            records = [{"level": level, **r} for level, rs in result.pop("records").items() for r in rs]
            ctx.cache.save_json(STAGE_PERF, perf_keys[workload.name], result, extra={"records.jsonl": records})
            _log_perf(ctx, workload.name, result)


def measure_inprocess(ctx, variant, checkpoint: Path, ckpt_key: str, record: dict, vdir: Path) -> None:
    from evals.backends.inprocess import inprocess_lm
    from quant.sweep import StageError, task_key

    keys = {t.key: task_key(ctx, t, ckpt_key, "inprocess") for t in ctx.recipe.tasks}
    todo = [t for t in ctx.recipe.tasks if not ctx.cache.has(STAGE_EVAL, keys[t.key])]
    todo_kl = kl_stage.todo(ctx, variant, keys)
    if todo or todo_kl:
        try:
            lm = inprocess_lm(checkpoint)
        except Exception as exc:  # noqa: BLE001 - any loader failure is this variant's reason
            raise StageError(f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}") from None
        for task in todo:
            _run_eval(ctx, lm, task, keys[task.key], variant.name)
        kl_stage.run(ctx, variant, lm, todo_kl, keys)
    for name, key in keys.items():
        _collect_eval(ctx, key, name, record, vdir, "inprocess")
    kl_stage.collect(ctx, variant, keys, record)


def _task_size(task: str) -> int | None:
    """Items in a task shipped with its data; None where only lm-eval knows."""
    from evals.registry import TASKS_DIR
    data = TASKS_DIR / task / "test.jsonl"
    return sum(1 for _ in data.open()) if data.exists() else None


def _log_perf(ctx, name: str, result: dict) -> None:
    from perf.run import level_label

    for p in result["points"]:
        if p["errors"] == p["n"]:
            ctx.reporter.log(f"  {name} {level_label(p)}: every request failed: {p.get('first_error')}",
                             style="red")
            continue
        ctx.reporter.log(f"  {name} {level_label(p)}: {p['output_tokens_per_s']:.0f} out tok/s, "
                         f"{p['requests_per_s']:.1f} req/s, TTFT p99 {p['ttft_ms']['p99']:.0f} ms, "
                         f"TPOT p99 {p['tpot_ms']['p99']:.1f} ms, errors {p['errors']}"
                         + (f", SLO met by {p['slo_attainment']:.0%} (goodput {p['goodput_rps']:.1f} req/s)"
                            if "slo_attainment" in p else ""))

