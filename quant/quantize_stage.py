"""The quantize stage of a sweep: a variant's checkpoint — the original model, a ready-made checkpoint, or one
quantized through quantize's one interface (a child process), cached by content."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from core.hashing import digest, tree_digest, versions
from core.memo import remembered, source_digest
from core.recipe import Variant
from core.store import read_json
from quant.context import Checkpoint, StageError, SweepContext
from quant.sensitivity_stage import ranking, with_kept_modules, write_report
from quantize import CPU_THREADS, QuantizeError, quantize_in_subprocess
from quantize import manifest as manifest_module
from quantize.calibration import calibration_key
from quantize.manifest import MANIFEST_NAME, checkpoint_facts, library_versions
from quantize.schemes import describe_variant

STAGE = "checkpoints"


def checkpoint_for(ctx: SweepContext, variant: Variant) -> Checkpoint:
    """Raises StageError with the reason when the checkpoint cannot be had."""
    path, key, manifest = _checkpoint(ctx, variant)
    size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and p.suffix == ".safetensors")
    return Checkpoint(path=path, key=key, manifest=manifest, size_bytes=size)


def _checkpoint(ctx: SweepContext, variant: Variant) -> tuple[Path, str, dict]:
    if variant.checkpoint:
        path = Path(variant.checkpoint).expanduser()
        if not path.is_dir():
            raise StageError(f"checkpoint {path} does not exist")
        key = tree_digest(path)
        return path.resolve(), key, _existing_manifest(path, key)
    if not variant.quantized:
        return ctx.model_dir, ctx.model_key, _original_manifest(ctx)
    if variant.sensitivity:
        variant = _keep_most_sensitive(ctx, variant)
    key = checkpoint_key(ctx, variant)
    if ctx.cache.has(STAGE, key):
        ctx.reporter.log(f"  checkpoint: cached ({key})")
    else:
        with ctx.cache.building(STAGE, key, on_wait=lambda: ctx.reporter.log(
                "  checkpoint: another sweep on this cache is building it; waiting")) as needed:
            if needed:
                _quantize(ctx, variant, key)
    path = ctx.cache.path(STAGE, key) / "model"
    manifest = read_json(path / MANIFEST_NAME) if (path / MANIFEST_NAME).exists() else {}
    return path, key, manifest


def is_built(ctx: SweepContext, variant: Variant) -> bool:
    """Whether a quantized variant's checkpoint (one without a sensitivity ranking) is in the stage cache (never,
    in a sweep without one)."""
    return ctx.cache is not None and ctx.cache.has(STAGE, checkpoint_key(ctx, variant))


def checkpoint_key(ctx: SweepContext, variant: Variant) -> str:
    unchanged = {"unfit_groups"} if variant.unfit_groups == "error" else set()   # keys as before the field
    quant_fields = variant.model_dump(mode="json",
                                      exclude={"name", "description", "engine_args", "kv_cache_dtype", "baseline"}
                                      | unchanged)
    backend_version = versions("gptqmodel") if variant.backend == "gptqmodel" else None
    return digest("checkpoint", ctx.model_key, quant_fields, calibration_key(ctx.recipe.calibration),
                  library_versions(), backend_version, {"cpu_threads": CPU_THREADS})


def _quantize(ctx: SweepContext, variant: Variant, key: str) -> None:
    ctx.reporter.log(f"  quantizing with {variant.backend} ({describe_variant(variant)}) …")
    build = ctx.cache.staging(STAGE, key)
    started = time.time()
    try:
        with ctx.reporter.steps(f"  quantize {variant.name}") as update:
            quantize_in_subprocess(ctx.model_dir, variant, ctx.recipe.calibration, build / "model",
                                   log_path=ctx.variant_dir(variant.name) / "quantize.log",
                                   on_progress=lambda p: update(p.done, p.total, p.describe()))
        ctx.cache.commit(STAGE, key, build)
    except QuantizeError as exc:
        shutil.rmtree(build, ignore_errors=True)
        raise StageError(str(exc)) from None
    except BaseException:
        shutil.rmtree(build, ignore_errors=True)
        raise
    ctx.reporter.log(f"  checkpoint ready in {time.time() - started:.1f}s")


def _keep_most_sensitive(ctx: SweepContext, variant: Variant) -> Variant:
    try:
        result = ranking(ctx.cache, ctx.reporter, ctx.model_dir, ctx.model_key, ctx.recipe, variant,
                         device=ctx.device)
    except ValueError as exc:
        raise StageError(f"sensitivity analysis: {exc}") from None
    try:
        keeping, units, bits = with_kept_modules(variant, result)
    except ValueError as exc:   # a bits budget below what quantizing everything takes
        raise StageError(f"sensitivity: {exc}") from None
    write_report(result, ctx.variant_dir(variant.name) / "sensitivity", variant.sensitivity)
    ctx.reporter.log(f"  sensitivity: keeping {len(units)} unit{'s' * (len(units) != 1)} in 16-bit ({bits:.3f} bits "
                     f"per weight over the units ranked): " + (", ".join(row["unit"] for row in units) or "none"))
    return keeping


def _original_manifest(ctx: SweepContext) -> dict:
    manifest = {"source": "original model", "scheme": "bf16"}
    if ctx.model_source:
        q = ctx.model_source["dequantized_from"]
        manifest.update(scheme=f"bf16 (dequantized from GGUF {q})", dequantized_from=q,
                        gguf_file=ctx.model_source["gguf_file"])
    return manifest


def _existing_manifest(path: Path, key: str) -> dict:
    """A ready-made checkpoint's facts: its own manifest if we made it, else what its files say (remembered by
    the checkpoint's content key: reading tensor shapes imports torch)."""
    if (path / MANIFEST_NAME).is_file():
        return {**read_json(path / MANIFEST_NAME), "source": "existing checkpoint"}
    try:
        facts = remembered("checkpoint-facts", (key, versions("safetensors"), source_digest(manifest_module.__file__)),
                           lambda: checkpoint_facts(path))
        return {"source": "existing checkpoint", **facts}
    except (OSError, ValueError, KeyError) as exc:
        return {"source": "existing checkpoint", "facts_error": f"{type(exc).__name__}: {exc}"}
