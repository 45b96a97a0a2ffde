"""`quant sweep`: recipe -> variants -> served evals and perf -> results.json and reports.

Each stage output lives in the content-addressed cache, so a re-run (or a run after a crash) redoes only
what is missing. A variant that fails is recorded with its reason and the sweep goes on.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from evals.registry import TASKS_DIR, check_code_isolation
from perf.engines.process import engine_warnings, log_since, run_tied_streaming
from core.hashing import digest, file_digest, tree_digest, versions
from quant.models import resolve_model
from quant.executors import run_variants
from quant.progress import Reporter
from core.recipe import Recipe, Variant
from core.store import Cache, read_json, remove_leftovers, write_json, write_jsonl
from quantize.gguf_source import source_facts
from quantize.manifest import library_versions

log = logging.getLogger(__name__)


class StageError(Exception):
    """A stage failed for this variant; the message is the reason recorded in results.json."""


@dataclass
class Context:
    recipe: Recipe
    out: Path
    cache: Cache
    model_dir: Path
    model_key: str
    engine_python: str
    engine_version: str | None
    reporter: Reporter
    retry_failed: bool = False
    kl_reference: dict = field(default_factory=dict)  # task -> the baseline's answers and their top-k
    model_source: dict | None = None  # what a GGUF model was before it was dequantized

    @property
    def engine_key(self) -> str:
        e = self.recipe.engine
        return digest(e.kind, e.args, e.env, e.dtype, self.engine_version)


def run_sweep(recipe: Recipe, out: Path, recipe_path: Path | None = None, cache_dir: Path | None = None,
              reporter: Reporter | None = None, only: list[str] | None = None, retry_failed: bool = False,
              allow_unisolated_code: bool = False) -> dict:
    """allow_unisolated_code (or the recipe's field): run generated code without bubblewrap where it is missing;
    without it a sweep with code tasks and no working bubblewrap raises IsolationRequired before any work."""
    from evals import sandbox

    with sandbox.permit_unisolated(allow_unisolated_code or recipe.allow_unisolated_code):
        return _sweep(recipe, out, recipe_path, cache_dir, reporter, only, retry_failed)


def _sweep(recipe: Recipe, out: Path, recipe_path: Path | None, cache_dir: Path | None,
           reporter: Reporter | None, only: list[str] | None, retry_failed: bool) -> dict:
    from evals import sandbox
    from perf.engines.vllm import engine_version, resolve_engine_python

    from quant.validate import raise_on_errors, validate

    reporter = reporter or Reporter()
    out = Path(out)
    findings = validate(recipe, recipe_path)   # everything knowable, before any work (RecipeError: all of it)
    raise_on_errors(findings, recipe, recipe_path)
    for line in findings.warnings:
        reporter.log(f"[yellow]warning[/yellow]: {line}")
    for line in findings.notes:
        reporter.log(line)
    code_tasks = check_code_isolation(recipe.tasks)
    model_dir = resolve_model(recipe.model, recipe_path.parent if recipe_path else None, log=reporter.log)
    engine_python = resolve_engine_python(recipe.engine.python)
    ctx = Context(recipe=recipe, out=out, cache=Cache(cache_dir or out.parent / ".cache"),
                  model_dir=model_dir, model_key=tree_digest(model_dir), engine_python=engine_python,
                  engine_version=engine_version(engine_python), reporter=reporter, retry_failed=retry_failed,
                  model_source=source_facts(model_dir))
    reporter.log(f"sweep [bold]{recipe.name}[/bold]: model {model_dir} · {len(recipe.variants)} variants · "
                 f"tasks {', '.join(t.key for t in recipe.tasks)} · engine {recipe.engine.kind} {ctx.engine_version}")
    leftovers = ctx.cache.remove_leftovers() + remove_leftovers(out, recursive=True)
    if leftovers:
        reporter.log(f"removed {len(leftovers)} unfinished file(s) of an interrupted run")
    results = _load_previous(out, recipe)
    results["code_sandbox"] = sandbox.describe()
    if ctx.model_source:
        results["model_source"] = ctx.model_source
        reporter.log(f"model dequantized from GGUF {ctx.model_source['dequantized_from']} "
                     f"({ctx.model_source['gguf_file']}): the bf16 baseline carries that rounding")
    unisolated = [name for name, where in code_tasks.items() if where == "host" or not sandbox.capabilities().isolated]
    if unisolated:
        reporter.log(f"[yellow]warning[/yellow]: generated code of {', '.join(unisolated)} runs on this host without "
                     f"isolation (opted in; {results['code_sandbox']})")
    chosen = [v for v in recipe.variants if not only or v.name in only]
    for variant, record in run_variants(ctx, chosen, recipe.execution, run_one=run_variant):
        results["variants"][variant.name] = record
        if variant.baseline:
            results["baseline_zero_tasks"] = warn_zero_baseline(results["variants"][variant.name], reporter)
        _save(out, results)
        status = results["variants"][variant.name]["status"]
        reporter.log(f"{variant.name}: {status}" + (f" — {results['variants'][variant.name]['reason']}"
                                                   if status != "ok" else ""),
                     style=None if status == "ok" else "yellow")
    results["finished"] = _now()
    _save(out, results)
    from reports.render import render_all
    written = render_all(out, results)
    top = [p.name for p in written if p.parent == out]
    reporter.log(f"wrote {out}/: {', '.join(top)}" + (f" and {len(written) - len(top)} per-variant files"
                                                     if len(written) > len(top) else ""))
    return results


def warn_zero_baseline(record: dict, reporter: Reporter) -> list[str]:
    """Tasks the baseline scores 0 on: no variant can score lower, so they cannot show a regression."""
    zero = [task for task, acc in record.get("accuracy", {}).items() if acc.get("value") == 0]
    for task in zero:
        reporter.log(f"[yellow]warning[/yellow]: the baseline scores 0 on {task}: that task cannot detect "
                     "regressions for this model (its prompt or answer format may not suit it)")
    return zero


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _load_previous(out: Path, recipe: Recipe) -> dict:
    results = {"recipe_name": recipe.name, "recipe": recipe.model_dump(mode="json"),
               "recipe_hash": recipe.content_hash(), "model": recipe.model,
               "baseline": recipe.baseline.name, "started": _now(), "variants": {}}
    previous = out / "results.json"
    if previous.exists():
        try:
            old = read_json(previous)
            if old.get("recipe_name") == recipe.name:  # keep variants this run does not redo (--only)
                results["variants"] = {k: v for k, v in old.get("variants", {}).items()
                                       if k in {v.name for v in recipe.variants}}
                results["baseline_zero_tasks"] = old.get("baseline_zero_tasks", [])
        except (OSError, json.JSONDecodeError):
            pass
    return results


def _save(out: Path, results: dict) -> None:
    write_json(out / "results.json", results)


# --- one variant -------------------------------------------------------------------------------------

def run_variant(ctx: Context, variant: Variant) -> dict:
    record: dict = {"name": variant.name, "baseline": variant.baseline, "status": "ok", "reason": None,
                    "description": variant.description, "accuracy": {}, "perf": {}, "memory": {}}
    try:
        checkpoint, ckpt_key, manifest = ensure_checkpoint(ctx, variant)
    except StageError as exc:
        return {**record, "status": "failed", "reason": f"quantization: {exc}"}
    size = sum(p.stat().st_size for p in checkpoint.rglob("*") if p.is_file() and p.suffix == ".safetensors")
    record.update(checkpoint=str(checkpoint), checkpoint_key=ckpt_key, size_bytes=size, manifest=manifest)
    record["memory"].update(_memory(ctx, variant, checkpoint, size))
    vdir = ctx.out / "variants" / variant.name
    server_log = vdir / "server.log"
    seen = server_log.stat().st_size if server_log.exists() else 0   # the log is appended to across runs
    try:
        measure_variant(ctx, variant, checkpoint, ckpt_key, record, vdir)
    except Exception as exc:  # noqa: BLE001 - one variant's failure must not end the sweep
        ctx.reporter.log(f"  [red]{type(exc).__name__}[/red]: {exc}")
        record.update(status="failed", reason=f"measurement: {type(exc).__name__}: {str(exc)[:300]}")
    finally:
        for line in engine_warnings(log_since(server_log, seen)):
            log.warning("%s engine: %s (%s)", variant.name, line, server_log)
    return record


DEFAULT_SEQ_TOKENS = 2048   # the memory columns' sequence length when the recipe has no workloads


def _memory(ctx: Context, variant: Variant, checkpoint: Path, weights_bytes: int) -> dict:
    from perf.memory import account
    from perf.requests import longest_request

    perf = ctx.recipe.perf
    first = perf.workloads[0] if perf.workloads else None
    engine_args = {**ctx.recipe.engine.args, **variant.engine_args}
    try:
        seq = longest_request(first) if first else DEFAULT_SEQ_TOKENS
        memory = account(checkpoint, weights_bytes, engine_args, seq, perf.accelerator_memory_gib,
                         perf.memory_utilization)
    except (OSError, KeyError, ValueError):
        return {"weights_bytes": weights_bytes}
    return {**memory, "seq_from": f"longest request of workload {first.name}" if first else "default (no workloads)"}


def ensure_checkpoint(ctx: Context, variant: Variant) -> tuple[Path, str, dict]:
    from quantize.progress import parse as parse_progress

    if variant.checkpoint:
        path = Path(variant.checkpoint).expanduser()
        if not path.is_dir():
            raise StageError(f"checkpoint {path} does not exist")
        return path.resolve(), tree_digest(path), _existing_manifest(path)
    if not variant.quantized:
        return ctx.model_dir, ctx.model_key, _original_manifest(ctx)
    if variant.sensitivity:
        variant = _keep_most_sensitive(ctx, variant)
    unchanged = {"unfit_groups"} if variant.unfit_groups == "error" else set()   # keys as before the field
    quant_fields = variant.model_dump(mode="json",
                                      exclude={"name", "description", "engine_args", "baseline"} | unchanged)
    backend_version = versions("gptqmodel") if variant.backend == "gptqmodel" else None
    key = digest("checkpoint", ctx.model_key, quant_fields, ctx.recipe.calibration.model_dump(mode="json"),
                 library_versions(), backend_version)
    if ctx.cache.has("checkpoints", key):
        ctx.reporter.log(f"  checkpoint: cached ({key})")
    else:
        ctx.reporter.log(f"  quantizing with {variant.backend} ({_describe(variant)}) …")
        build = ctx.cache.staging("checkpoints", key)
        started = time.time()
        log_path = ctx.out / "variants" / variant.name / "quantize.log"
        try:   # the quantizer dies with the sweep, even a SIGKILLed one (it may hold a GPU)
            with ctx.reporter.steps(f"  quantize {variant.name}") as update:
                def show(line: str) -> None:
                    if (p := parse_progress(line)) is not None:
                        update(p.done, p.total, p.describe())
                proc = run_tied_streaming([sys.executable, "-m", "quantize", "--model", str(ctx.model_dir),
                                           "--variant-json", variant.model_dump_json(), "--calibration-json",
                                           ctx.recipe.calibration.model_dump_json(), "--out", str(build / "model")],
                                          log_path, on_line=show)
            if proc.returncode != 0:
                raise StageError(_last_error(proc.stdout) or f"exit code {proc.returncode} (see {log_path})")
            ctx.cache.commit("checkpoints", key, build)
        except BaseException:
            shutil.rmtree(build, ignore_errors=True)
            raise
        ctx.reporter.log(f"  checkpoint ready in {time.time() - started:.1f}s")
    path = ctx.cache.path("checkpoints", key) / "model"
    manifest_path = path / "quant_manifest.json"
    manifest = read_json(manifest_path) if manifest_path.exists() else {}
    return path, key, manifest


def _keep_most_sensitive(ctx: Context, variant: Variant) -> Variant:
    from quant.sensitivity import ranking, with_kept_modules, write_report
    try:
        result = ranking(ctx.cache, ctx.reporter, ctx.model_dir, ctx.model_key, ctx.recipe, variant)
    except ValueError as exc:
        raise StageError(f"sensitivity analysis: {exc}") from None
    try:
        keeping, units, bits = with_kept_modules(variant, result)
    except ValueError as exc:   # a bits budget below what quantizing everything takes
        raise StageError(f"sensitivity: {exc}") from None
    write_report(result, ctx.out / "variants" / variant.name / "sensitivity", variant.sensitivity)
    ctx.reporter.log(f"  sensitivity: keeping {len(units)} unit{'s' * (len(units) != 1)} in 16-bit ({bits:.3f} bits "
                     f"per weight over the units ranked): " + (", ".join(row["unit"] for row in units) or "none"))
    return keeping


def _original_manifest(ctx: Context) -> dict:
    manifest = {"source": "original model", "scheme": "bf16"}
    if ctx.model_source:
        q = ctx.model_source["dequantized_from"]
        manifest.update(scheme=f"bf16 (dequantized from GGUF {q})", dequantized_from=q,
                        gguf_file=ctx.model_source["gguf_file"])
    return manifest


def _existing_manifest(path: Path) -> dict:
    """A ready-made checkpoint's facts: its own manifest if we made it, else what its files say."""
    from quantize.manifest import MANIFEST_NAME, checkpoint_facts

    if (path / MANIFEST_NAME).is_file():
        return {**read_json(path / MANIFEST_NAME), "source": "existing checkpoint"}
    try:
        return {"source": "existing checkpoint", **checkpoint_facts(path)}
    except (OSError, ValueError, KeyError) as exc:
        return {"source": "existing checkpoint", "facts_error": f"{type(exc).__name__}: {exc}"}


def _describe(variant: Variant) -> str:
    if variant.recipe:
        return "verbatim llmcompressor recipe"
    if variant.groups:
        scheme = " + ".join(f"{g.scheme or f'W{g.weights.num_bits}A16 custom'} on {', '.join(g.targets)}"
                            for g in variant.groups)
    else:
        scheme = variant.scheme or f"W{variant.weights.num_bits}A16 custom"
    extra = f" + SmoothQuant {variant.smoothquant}" if variant.smoothquant else ""
    return f"{scheme}, {variant.algorithm.upper()}{extra}, 16-bit: {', '.join(variant.ignore) or 'none'}"


def _last_error(stderr: str) -> str | None:
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("QUANTIZE-ERROR:"):
            return line.removeprefix("QUANTIZE-ERROR:").strip()
    return lines[-1][:300] if lines else None


def task_key(ctx: Context, task, ckpt_key: str, backend: str, engine_args: dict | None = None) -> str:
    """Served evals depend on the engine's flags too (e.g. an FP8 KV cache changes the outputs)."""
    task_dir = TASKS_DIR / task.name
    task_src = tree_digest(task_dir) if task_dir.is_dir() else task.name
    options = task.lm_eval_options()
    files = options.pop("data_files", None)
    files = {"test": files} if isinstance(files, str) else files or {}
    data = {split: file_digest(Path(path)) for split, path in files.items()}
    engine = (digest(ctx.engine_key, engine_args or {}) if backend == "served"
              else digest(versions("transformers", "compressed-tensors")))
    return digest("eval", "lm-eval-files", ckpt_key, task.name, task_src, task.limit, options, data, backend,
                  engine, versions("lm_eval"))


def perf_key(ctx: Context, workload, ckpt_key: str, engine_args: dict) -> str:
    slo = ctx.recipe.perf.slo.bounds() if ctx.recipe.perf.slo else None
    return digest("perf", ckpt_key, workload.model_dump(mode="json"), ctx.engine_key, engine_args, slo,
                  ctx.recipe.engine.engine_core_nice)


def measure_variant(ctx: Context, variant: Variant, checkpoint: Path, ckpt_key: str, record: dict,
                    vdir: Path) -> None:
    from quant.measure import measure_inprocess, measure_served

    serve_failure_key = digest("serve-failure", ckpt_key, ctx.engine_key, variant.engine_args)
    failed_before = ctx.cache.has("serve-failures", serve_failure_key) and not ctx.retry_failed
    if failed_before:
        reason = ctx.cache.load_json("serve-failures", serve_failure_key)["reason"]
        ctx.reporter.log(f"  engine rejected this variant before (cached): {reason}")
    else:
        reason = measure_served(ctx, variant, checkpoint, ckpt_key, record, vdir)
        if reason:
            ctx.cache.save_json("serve-failures", serve_failure_key, {"reason": reason})
    if reason:
        record.update(status="unsupported", reason=f"engine: {reason}", served=False,
                      eval_backend="inprocess")
        ctx.reporter.log("  measuring accuracy in-process (transformers) instead; no perf numbers")
        try:
            measure_inprocess(ctx, variant, checkpoint, ckpt_key, record, vdir)
        except StageError as exc:
            record.update(status="failed", reason=f"{record['reason']}; in-process eval: {exc}")
    else:
        record.update(served=True, eval_backend="served")
    write_jsonl(vdir / "accuracy.jsonl", [{"task": t, **a} for t, a in record["accuracy"].items()])
