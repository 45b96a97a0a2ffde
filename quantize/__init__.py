"""The quantize stage: one Variant of a model -> a compressed-tensors checkpoint plus quant_manifest.json.

In-process API: quantize_variant(). The sweep goes through quantize_in_subprocess() (quantize/child_process.py,
`python -m quantize`) so a crash inside the quantization libraries cannot take the sweep down.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from core.recipe import Calibration, Variant
from quantize import schemes
from quantize.calibration import calibration_texts, texts_sha256
from quantize.manifest import MANIFEST_NAME, checkpoint_facts, library_versions, write_manifest
from quantize.progress import emit as emit_progress
from quantize.child_process import QuantizeError, quantize_in_subprocess
from quantize.shapes import apply_unfit_policy, describe_unfit

__all__ = ["quantize_variant", "quantize_in_subprocess", "QuantizeError", "MANIFEST_NAME", "CPU_THREADS"]

# Threads torch computes on where no accelerator quantizes: one. A checkpoint's bytes then do not depend on the
# machine's core count (a GPTQ checkpoint of the demo model built on 2 threads differs from one built on 1 in 22
# of its 94 tensors), and a build beside a served model uses the core the engine leaves it: with 2 threads, each
# parallel step waits for a thread the engine holds. Part of every checkpoint's cache key (quant/quantize_stage.py).
CPU_THREADS = 1


def quantize_variant(model_dir: Path, variant: Variant, calibration: Calibration, out_dir: Path,
                     backend: str | None = None, dense: bool = False) -> dict[str, Any]:
    """Quantize model_dir as `variant` into out_dir (replaced atomically); return the manifest.

    dense=True writes a fake-quantized 16-bit checkpoint instead (weights = the dequantized values) for
    weight-only schemes no engine kernel serves (e.g. 2-bit); size and bit facts then describe the packed
    form it stands for, and the manifest says `fake_quantized: true`."""
    from quantize.backends import get_backend

    model_dir, out_dir = Path(model_dir), Path(out_dir)
    if not (model_dir / "config.json").is_file():
        raise FileNotFoundError(f"{model_dir}: not a model directory (no config.json)")
    if variant.checkpoint is not None or not variant.quantized:
        raise ValueError(f"variant {variant.name}: nothing to quantize (baseline or ready-made checkpoint)")
    impl = get_backend(backend or variant.backend)
    schemes.check(variant)
    requested = variant
    variant, unfit = apply_unfit_policy(model_dir, variant)
    if unfit:
        print(describe_unfit(unfit), flush=True)
    if dense and impl.NAME != "llmcompressor":
        raise ValueError("a dense fake-quantized export reads compressed-tensors: use backend llmcompressor")

    texts = calibration_texts(calibration, model_dir) if impl.needs_calibration(variant) else None
    impl.warm_up()  # library imports are not quantization time
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"
    packed = out_dir.parent / f".{out_dir.name}.packed-{os.getpid()}"
    for stale in (tmp, packed):
        shutil.rmtree(stale, ignore_errors=True)
    try:
        start = time.perf_counter()
        emit_progress(0, 2, "steps", "quantizing")
        with _cpu_threads() as threads:
            info = impl.quantize(model_dir, variant, texts, calibration, packed if dense else tmp)
        wall = time.perf_counter() - start
        emit_progress(1, 2, "steps", "writing the checkpoint")
        facts = checkpoint_facts(packed if dense else tmp)
        if dense:
            from quantize.dense import write_dense

            write_dense(packed, tmp)
            facts = _dense_facts(facts, tmp)
        manifest = {
            "variant": variant.name,
            "fake_quantized": False,
            "source_model": str(model_dir.resolve()),
            "scheme": requested.scheme,
            "weights": requested.weights.model_dump() if requested.weights else None,
            "groups": [g.model_dump(exclude_none=True) for g in variant.groups] if variant.groups else None,
            "recipe_source": variant.recipe,
            "algorithm": None if variant.recipe is not None else variant.algorithm,
            "smoothquant": variant.smoothquant,
            "actorder": variant.actorder,
            "ignore": list(variant.ignore),
            "unfit_groups": unfit,   # what became of Linears whose in_features the group size does not divide
            **facts,
            **info,
            "recipe_sha256": _sha256(info.get("recipe", info.get("config"))),
            "versions": library_versions(),
            "quantization_seconds": round(wall, 3),
            "cpu_threads": threads,   # torch's threads where it quantized on the CPU (None: on an accelerator)
            "calibration": _calibration_record(calibration, texts),
        }
        write_manifest(tmp, manifest)
        _replace_dir(tmp, out_dir)
        emit_progress(2, 2, "steps", "done")
    finally:
        for leftover in (tmp, packed):
            shutil.rmtree(leftover, ignore_errors=True)
    return manifest


@contextlib.contextmanager
def _cpu_threads() -> Iterator[int | None]:
    """torch on CPU_THREADS threads inside the block where no accelerator is there to quantize on; yields that
    count (None where an accelerator quantizes)."""
    import torch

    if torch.accelerator.is_available():
        yield None
        return
    before = torch.get_num_threads()
    torch.set_num_threads(CPU_THREADS)
    try:
        yield CPU_THREADS
    finally:
        torch.set_num_threads(before)


def _sha256(what_ran: Any) -> str:
    """The hash of what the backend ran: a verbatim recipe's text, else its modifiers/config as JSON."""
    text = what_ran if isinstance(what_ran, str) else json.dumps(what_ran, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _dense_facts(packed_facts: dict[str, Any], dense_dir: Path) -> dict[str, Any]:
    from quantize.manifest import size_on_disk

    total, weights = size_on_disk(dense_dir)
    return {**packed_facts, "fake_quantized": True, "packed_format": packed_facts["format"],
            "format": "dense (fake-quantized: 16-bit weights holding the dequantized values)",
            "packed_size_bytes": packed_facts["size_bytes"], "packed_weights_bytes": packed_facts["weights_bytes"],
            "size_bytes": total, "weights_bytes": weights}


def _calibration_record(calibration: Calibration, texts: list[str] | None) -> dict[str, Any] | None:
    if texts is None:
        return None  # data-free (RTN weights, dynamic activations): no calibration set was used
    return {**calibration.model_dump(mode="json", exclude_none=True), "num_samples": len(texts),
            "requested_samples": calibration.num_samples, "texts_sha256": texts_sha256(texts)}


def _replace_dir(src: Path, dst: Path) -> None:
    """Move src onto dst. os.replace cannot replace a non-empty directory, so an old dst is first
    renamed aside: dst is briefly absent, but never half-written."""
    if not dst.exists():
        os.replace(src, dst)
        return
    old = dst.parent / f".{dst.name}.old-{os.getpid()}"
    shutil.rmtree(old, ignore_errors=True)
    os.replace(dst, old)
    os.replace(src, dst)
    shutil.rmtree(old, ignore_errors=True)

