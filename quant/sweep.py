"""`quant sweep`: recipe -> per variant: quantize -> evals -> KL -> perf -> results.json -> reports.

Each stage output lives in the content-addressed cache, so a re-run (or a run after a crash) redoes only
what is missing. A variant that fails is recorded with its reason and the sweep goes on.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from contextlib import closing
from pathlib import Path

from pydantic import ValidationError
from rich.markup import escape

from core.foreign_text import capped
from core.hashing import tree_digest
from core.recipe import Recipe, RecipeError, Variant
from core.remote import Location, locate
from core.results import SCHEMA_VERSION, Results, VariantRecord, first_problem
from core.run_layout import RunLayout, VariantLayout
from core.store import Cache, read_json, remove_leftovers
from evals import sandbox
from evals.validate import check_code_isolation
from perf.engines.gpu_choice import NoGpuFree
from perf.engines.process import EngineStartError
from perf.engines.vllm import resolve_engine_python
from quant.context import StageError, SweepContext, new_record
from quant.executors import run_variants
from quant.gpu_pin import pinned
from quant.endpoint_probe import probe_endpoints
from quant.engine_notes import record_engine_notes
from quant.inprocess_plan import sweep_device
from quant.logs import append_traceback
from quant.measure import measure_variant
from quant.measure_endpoint import run_endpoint_variant, run_llamacpp_variant
from quant.models import resolve_model
from quant.perf_stage import memory_columns
from quant.progress import Reporter
from quant.quantize_stage import checkpoint_for
from quant.results_writer import ResultsWriter, damaged
from quant.timing import timed
from quant.validate import Trust, engine_facts_once, raise_on_errors, validate
from quantize.gguf_source import source_facts
from reports.render import render_all


def run_sweep(recipe: Recipe, out: Location | str | Path, recipe_path: Path | None = None,
              cache_dir: str | Path | None = None,
              reporter: Reporter | None = None, only: list[str] | None = None, retry_failed: bool = False,
              allow_unisolated_code: bool = False, device: str = "auto", allow_long_cpu_eval: bool = False,
              replace_run: bool = False, trust_remote_code: bool = False) -> dict:
    """The pipeline: check the recipe; per variant (the baseline first: KL needs it) quantize, then evals, KL
    and perf (run_variant: one after another here, or side by side on Ray: quant/executors), saving
    results.json after each; then the reports.

    device: where the sweep's own model work runs (`auto`: CUDA where visible; quant/inprocess_plan.py).
    allow_long_cpu_eval: score a variant the engine cannot serve in-process on the CPU even where that is
    estimated to take longer than quant/inprocess_plan.CPU_LIMIT_S (default: recorded unsupported, not scored).

    trust_remote_code: let the recipe's engine arguments set trust_remote_code (else refused before work).

    allow_unisolated_code (or the recipe's field): run generated code without bubblewrap where it is missing;
    without it a sweep with code tasks and no working bubblewrap raises IsolationRequired before any work.

    out and cache_dir may be fsspec URLs (core/remote.py): the run is built in this node's mirror of out and
    published there as it goes (results.json after each variant, the reports at the end)."""
    reporter = reporter or Reporter()
    location = out if isinstance(out, Location) else locate(out, "runs")
    out = location.local
    with sandbox.permit_unisolated(allow_unisolated_code or recipe.allow_unisolated_code):
        code_tasks = _check(recipe, recipe_path, reporter, only, trust_remote_code)   # all knowable, before work
        endpoints = probe_endpoints(recipe, recipe_path, only)
        if location.remote:   # the URL is the truth: an earlier run there is resumed as a local one would be
            shutil.rmtree(out, ignore_errors=True)
            location.remote.download_run(out)
        if not replace_run:
            _check_not_another_run(out, recipe, str(location))
        chosen = [v for v in recipe.variants if not only or v.name in only]
        ctx = _context(recipe, location, recipe_path, cache_dir, reporter, retry_failed, sweep_device(device),
                       len(chosen))
        ctx.allow_long_cpu_eval = allow_long_cpu_eval
        ctx.endpoints.update(endpoints)
        results = _load_previous(out, recipe, damaged_at=str(location) if location.remote and not replace_run else None)
        writer = ResultsWriter(out, location.remote, {v.name for v in recipe.variants}, replace_run)
        _note_sources(ctx, results, code_tasks)
        with closing(run_variants(ctx, chosen, recipe.execution, run_one=run_variant)) as ran:
            for variant, record in ran:
                _take(ctx, writer, results, variant, record)
        results["finished"] = _now()
        writer.save(results)
        _report(ctx, results)
    return results


def _take(ctx: SweepContext, writer: ResultsWriter, results: dict, variant: Variant, record: dict) -> None:
    """A finished variant's record into the results (saved and published). EngineStartError where the engine
    refused to start with the recipe's engine arguments or environment: every later variant would meet the same."""
    reporter = ctx.reporter
    record = _valid_record(variant, record)
    results["variants"][variant.name] = record
    _note_gpu_identity(results)
    if ctx.out_remote and record.get("ran_on", {}).get("executor") != "local":
        # what the variant's worker (maybe another node) published: per-item files, perf records, server log
        ctx.out_remote.download_dir(f"variants/{variant.name}", ctx.variant_dir(variant.name))
    if variant.baseline:
        results["baseline_zero_tasks"] = warn_zero_baseline(record, reporter)
    writer.took(variant.name)
    writer.save(results)
    ok = record["status"] == "ok"
    if record.get("engine_refused_recipe"):
        raise EngineStartError(f"variant {variant.name}: {record['reason']}")
    unmeasured = (record.get("not_measurable") or {}).get("perf")
    said = f" — perf not measurable: every request failed at {', '.join(unmeasured)}" if ok and unmeasured else ""
    reporter.log(f"{variant.name}: {record['status']}" + ("" if ok else f" — {escape(str(record['reason']))}")
                 + escape(said), style=None if ok and not said else "yellow")


REASON_LIMIT = 2000


def _note_gpu_identity(results: dict) -> None:
    """The run's `engine.gpu`: the GPUs its pinned variants ran on where they all ran on the same kind and count;
    none where they differ (each variant's `ran_on.gpu` says); left as it was where none was pinned."""
    found = [r["ran_on"]["gpu"] for r in results["variants"].values() if (r.get("ran_on") or {}).get("gpu")]
    if found and all(g == found[0] for g in found):
        results["engine"]["gpu"] = found[0]
    elif found:
        results["engine"].pop("gpu", None)


def _valid_record(variant: Variant, record: dict) -> dict:
    """The record as results.json's schema takes it, its reason within REASON_LIMIT characters; one it refuses
    (an endpoint's absurd numbers that got through) fails that variant, named, instead of the sweep."""
    if isinstance(record.get("reason"), str):   # a reason may quote a server at any length
        record["reason"] = capped(record["reason"], REASON_LIMIT)
    try:
        VariantRecord.model_validate(record)
        return record
    except ValidationError as exc:
        return new_record(variant, "failed", f"its measurements are not valid results: {first_problem(exc)}")


def _check(recipe: Recipe, recipe_path: Path | None, reporter: Reporter, only: list[str] | None,
           trust_remote_code: bool) -> dict[str, str]:
    """Raises RecipeError with every problem at once; returns the code tasks and where their code runs."""
    unknown = [name for name in only or [] if name not in {v.name for v in recipe.variants}]
    if unknown:
        source = str(recipe_path) if recipe_path else f"recipe {recipe.name}"
        raise RecipeError(f"--only: no variant {', '.join(map(repr, unknown))} in {source}; its variants: "
                          f"{', '.join(v.name for v in recipe.variants)}", source)
    findings = validate(recipe, recipe_path, trust=Trust(run_recipe=True, remote_code=trust_remote_code))
    raise_on_errors(findings, recipe, recipe_path)
    for line in findings.warnings:
        reporter.log(f"[yellow]warning[/yellow]: {escape(line)}")
    for line in findings.notes:
        reporter.log(line)
    return check_code_isolation(recipe.tasks)


def _default_cache(location: Location) -> str | Path:
    """Beside the run directory: runs/.cache for runs/<name>, and likewise at a URL."""
    if location.remote:
        parent = location.remote.url.rpartition("/")[0]
        return (location.remote.url if parent.endswith(":/") else parent) + "/.cache"   # s3://bucket: inside it
    return location.local.parent / ".cache"


def _context(recipe: Recipe, location: Location, recipe_path: Path | None, cache_dir: str | Path | None,
             reporter: Reporter, retry_failed: bool, device: str, running: int) -> SweepContext:
    out = location.local
    cache = Cache.at(cache_dir or _default_cache(location))
    model_dir = resolve_model(recipe.model, recipe_path.parent if recipe_path else None, log=reporter.log,
                              revision=recipe.revision)
    engine_python = resolve_engine_python(recipe.engine.python)
    engine = engine_facts_once(engine_python, recipe.engine.env)
    ctx = SweepContext(recipe=recipe, out=out, out_remote=location.remote, cache=cache,
                       model_dir=model_dir, model_key=tree_digest(model_dir), engine_python=engine_python,
                       engine_version=engine["version"], reporter=reporter, retry_failed=retry_failed,
                       model_source=source_facts(model_dir), engine_facts={"kind": recipe.engine.kind, **engine},
                       device=device)
    ctx.engine_facts["dtype"] = ctx.served_dtype
    if ctx.gpu:
        ctx.engine_facts["gpu"] = ctx.gpu
    of_all = f"{running} of {len(recipe.variants)}" if running < len(recipe.variants) else str(running)
    reporter.log(f"sweep [bold]{recipe.name}[/bold]: model {model_dir} · {of_all} variants · "
                 f"tasks {', '.join(t.key for t in recipe.tasks)} · engine "
                 f"{engine['distribution'] or recipe.engine.kind} {ctx.engine_version} "
                 f"({', '.join(filter(None, (engine['device'] or 'device unknown', engine.get('cpu_isa'), ctx.served_dtype)))})")
    leftovers = ctx.cache.remove_leftovers() + remove_leftovers(out, recursive=True)
    if leftovers:
        reporter.log(f"removed {len(leftovers)} unfinished file(s) of an interrupted run")
    return ctx


def _note_sources(ctx: SweepContext, results: dict, code_tasks: dict[str, str]) -> None:
    """Into results and the log: how generated code is confined, what a GGUF model was, and the engine
    (`quant choose` prints the serve command for its device)."""
    results["code_sandbox"] = sandbox.describe()
    results["engine"] = ctx.engine_facts
    if ctx.model_source:
        results["model_source"] = ctx.model_source
        ctx.reporter.log(f"model dequantized from GGUF {ctx.model_source['dequantized_from']} "
                         f"({ctx.model_source['gguf_file']}): the bf16 baseline carries that rounding")
    unisolated = [name for name, where in code_tasks.items() if where == "host" or not sandbox.capabilities().isolated]
    if unisolated:
        ctx.reporter.log(f"[yellow]warning[/yellow]: generated code of {', '.join(unisolated)} runs on this host "
                         f"without isolation (opted in; {results['code_sandbox']})")


def _report(ctx: SweepContext, results: dict) -> None:
    from quant.history import write_perf_history

    out = ctx.out
    write_perf_history(out, results)   # earlier runs of the same variants, for report.html's plot
    written = render_all(out, results)
    _publish(ctx, *written)
    top = [p.name for p in written if p.parent == out]
    where = ctx.out_remote.url if ctx.out_remote else out
    ctx.reporter.log(f"wrote {where}/: {', '.join(top)}" + (f" and {len(written) - len(top)} per-variant files"
                                                           if len(written) > len(top) else ""))


def _publish(ctx: SweepContext, *paths: Path) -> None:
    """Files of the run directory, uploaded where the run lives at a URL."""
    if ctx.out_remote:
        for path in paths:
            ctx.out_remote.upload_file(path, path.relative_to(ctx.out).as_posix())


def warn_zero_baseline(record: dict, reporter: Reporter) -> list[str]:
    """Tasks the baseline scores 0 on: no variant can score lower, so they cannot show a regression."""
    zero = [task for task, acc in record.get("accuracy", {}).items() if acc.get("value") == 0]
    for task in zero:
        reporter.log(f"[yellow]warning[/yellow]: the baseline scores 0 on {task}: that task cannot detect "
                     "regressions for this model (its prompt or answer format may not suit it)")
    return zero


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _check_not_another_run(out: Path, recipe: Recipe, where: str) -> None:
    """A run directory holding another recipe's run is not this sweep's to replace (RecipeError, exit 2)."""
    try:
        other = read_json(RunLayout(out).results).get("recipe_name")
    except (OSError, json.JSONDecodeError, AttributeError):
        return
    if isinstance(other, str) and other != recipe.name:
        raise RecipeError(f"--out {where}: holds a run of recipe {other!r}, not {recipe.name!r}; choose another "
                          "--out, or pass --replace-run to replace it", where)


def _load_previous(out: Path, recipe: Recipe, damaged_at: str | None = None) -> dict:
    """A new run's document; with the variants of an earlier run of the same recipe in `out` that this run
    does not redo (--only). An earlier unversioned file is read like version 1 (re-running the sweep is how
    an old run directory is brought up to date). damaged_at: the URL `out` mirrors, where a results.json that
    cannot be read is not this sweep's to replace (RemoteError) but for --replace-run."""
    results = Results(schema_version=SCHEMA_VERSION, recipe_name=recipe.name,
                      recipe=recipe.model_dump(mode="json"), recipe_hash=recipe.content_hash(),
                      model=recipe.model, baseline=recipe.baseline.name, started=_now(), variants={}).dump()
    layout = RunLayout(out)
    if layout.results.exists():
        try:
            old = Results.model_validate(read_json(layout.results))
        except (OSError, ValueError) as exc:   # not ours, or damaged: rewritten by this run (locally)
            if damaged_at:
                why = first_problem(exc) if isinstance(exc, ValidationError) else str(exc).splitlines()[0][:160]
                raise damaged(damaged_at, why) from None
            return results
        if old.recipe_name == recipe.name:
            names = {v.name for v in recipe.variants}
            results["variants"] = {k: v.dump() for k, v in old.variants.items() if k in names}
            results["baseline_zero_tasks"] = old.baseline_zero_tasks or []
    return results


# --- one variant -------------------------------------------------------------------------------------

def run_variant(ctx: SweepContext, variant: Variant) -> dict:
    """The variant's record: its checkpoint (quantize stage), then evals, KL and perf on it (measure.py); an
    endpoint variant's on its running server (measure_endpoint.py)."""
    if variant.endpoint is not None:
        return run_endpoint_variant(ctx, variant)
    if variant.llamacpp is not None:
        return run_llamacpp_variant(ctx, variant)
    try:
        with pinned(ctx, variant) as gpus:
            identity = ctx.variant_gpu
            record = _run_pinned(ctx, variant)
    except NoGpuFree as exc:
        return {**new_record(variant), "status": "failed", "reason": f"no GPU free: {exc}"}
    if gpus:
        record.setdefault("ran_on", {}).update(gpus=[g.uuid for g in gpus], gpu=identity)
    return record


def _run_pinned(ctx: SweepContext, variant: Variant) -> dict:
    record = new_record(variant)
    try:
        with timed(record, "quantize"):
            checkpoint = ctx.ahead.checkpoint(variant) if ctx.ahead else checkpoint_for(ctx, variant)
    except StageError as exc:
        return {**record, "status": "failed", "reason": f"quantization: {exc}"}
    finally:
        if ctx.ahead and variant.name in ctx.ahead.seconds:   # off the critical path: beside the stages above
            record["ran_on"]["stages"]["quantize_ahead"] = ctx.ahead.seconds[variant.name]
    record.update(checkpoint=str(checkpoint.path), checkpoint_key=checkpoint.key, size_bytes=checkpoint.size_bytes,
                  manifest=checkpoint.manifest)
    record["memory"].update(memory_columns(ctx, variant, checkpoint.path, checkpoint.size_bytes))
    server_log = ctx.variant_dir(variant.name) / "server.log"
    seen = server_log.stat().st_size if server_log.exists() else 0   # the log is appended to across runs
    if ctx.starts and (started_ahead := ctx.starts.log_offset(variant)) is not None:
        seen = min(seen, started_ahead)
    try:
        measure_variant(ctx, variant, checkpoint, record)
    except Exception as exc:  # noqa: BLE001 - one variant's failure must not end the sweep
        ctx.reporter.log(f"  [red]{type(exc).__name__}[/red]: {escape(str(exc))}")
        record.update(status="failed", reason=f"measurement: {type(exc).__name__}: {str(exc)[:300]}")
        append_traceback(VariantLayout(ctx.variant_dir(variant.name)).errors_log, "the measurement failed:", exc)
    finally:
        record_engine_notes(ctx, variant, checkpoint, server_log, seen, record)
        if ctx.out_remote and ctx.variant_dir(variant.name).is_dir():   # for the driver, wherever this ran
            ctx.out_remote.upload_dir(ctx.variant_dir(variant.name), f"variants/{variant.name}")
    return record
