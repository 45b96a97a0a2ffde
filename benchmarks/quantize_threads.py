"""The lean demo's checkpoints quantized on one torch thread and on several: each one's time and the sha256 of its
weights, and whether the thread count changed them.

Each variant of the recipe that is quantized goes through the quantize stage's own child process (`python -m
quantize`, as a sweep runs it), one after another, first on `--threads` (the quantizer's setting on a CPU,
quantize.CPU_THREADS, replaced in the child only) then on one. Run it on an idle machine for the times; the
checkpoints' bytes do not depend on the load.

Usage: python benchmarks/quantize_threads.py [--recipe recipes/demo.yaml] [--threads 2] [--work DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from core.recipe import load_recipe  # noqa: E402
from quant.models import resolve_model  # noqa: E402
from quantize.child_process import quantize_in_subprocess  # noqa: E402

# put first on the quantizer's PYTHONPATH: its processes (the supervisor and the worker that quantizes) quantize
# on that many threads
SITECUSTOMIZE = "import quantize\nquantize.CPU_THREADS = {threads}\n"


def weights_sha256(checkpoint: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(checkpoint.glob("*.safetensors")):
        h.update(path.read_bytes())
    return h.hexdigest()


def build_all(recipe, model_dir: Path, threads: int, work: Path) -> dict[str, tuple[float, str]]:
    patch = work / f"threads-{threads}"
    patch.mkdir(parents=True, exist_ok=True)
    (patch / "sitecustomize.py").write_text(SITECUSTOMIZE.format(threads=threads))
    env = {"PYTHONPATH": os.pathsep.join([str(patch), str(REPO)])}
    built = {}
    for variant in (v for v in recipe.variants if v.quantized and not v.checkpoint):
        out = work / f"{threads}-threads" / variant.name
        started = time.perf_counter()
        quantize_in_subprocess(model_dir, variant, recipe.calibration, out, log_path=out.with_suffix(".log"), env=env)
        built[variant.name] = (time.perf_counter() - started, weights_sha256(out))
        print(f"{threads} thread(s)  {variant.name:28s} {built[variant.name][0]:6.1f} s  "
              f"sha256 {built[variant.name][1][:16]}", flush=True)
    return built


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipe", default=str(REPO / "recipes/demo.yaml"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", type=Path, default=None)
    args = ap.parse_args()
    recipe = load_recipe(args.recipe)
    model_dir = resolve_model(recipe.model)
    with tempfile.TemporaryDirectory(prefix="quantize-threads-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        several, one = build_all(recipe, model_dir, args.threads, work), build_all(recipe, model_dir, 1, work)
    print(f"\n{'variant':28s} {args.threads} threads   1 thread   same bytes")
    for name in one:
        print(f"{name:28s} {several[name][0]:7.1f} s  {one[name][0]:7.1f} s   {several[name][1] == one[name][1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
