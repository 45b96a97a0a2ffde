"""Where a sweep's time goes: one recipe from an empty cache, then an unchanged re-run, per checkout.

For each checkout given (default: this one) the recipe is swept into a fresh run directory and stage cache, so
every stage is really done; then the same command again, which finds everything cached. Printed: the wall time
of both runs, and per variant the seconds of each stage (quantize, engine start, in-process model load, evals,
KL, perf: `ran_on.stages` in results.json) with their share of the sweep, plus what lies outside the variants
(start-up and validation before the first, reports after the last). "quantized ahead" is quantization done in
the background while earlier variants were measured (quant/ahead.py), "started ahead" a server's start-up beside
the previous variant's evals (quant/start_ahead.py): beside the stages, not part of the sum; what a variant still
waited for them is its "quantize" and "engine start". Several checkouts (say a worktree of an
older commit and this one) run one after another on the same machine, so their numbers are side by side.

Usage: python benchmarks/sweep_time.py RECIPE [--checkout DIR ...] [--work DIR] [--json FILE] [--only VARIANT ...]
(a relative RECIPE is read from each checkout)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STAGES = ("quantize", "engine_start", "model_load", "evals", "kl", "perf")
# done in the background while earlier variants were measured: quantization, a server's start-up
BESIDE = {"quantize_ahead": "quantized ahead", "engine_start_ahead": "started ahead"}


def sweep(checkout: Path, recipe: Path, out: Path, cache: Path, only: list[str]) -> dict:
    """One `quant sweep` with the checkout's code and environments; its wall time, start and exit code. Models
    converted on load (a GGUF file dequantized) go to a cache beside the stage cache: empty at first, as on a
    fresh machine."""
    env = {**os.environ, "PYTHONPATH": str(checkout), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "QUANT_MODEL_CACHE": str(cache.parent / "models")}
    started = time.time()
    argv = [str(checkout / ".venv/bin/python"), "-m", "quant.cli", "sweep", str(recipe), "--out", str(out),
            "--cache-dir", str(cache), "--quiet", *(["--only", *only] if only else [])]
    proc = subprocess.run(argv, cwd=checkout, env=env, text=True, capture_output=True)
    wall = time.time() - started
    if proc.returncode not in (0, 1):
        raise SystemExit(f"sweep with {checkout} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return {"wall_s": wall, "started": started, "exit": proc.returncode}


def breakdown(results: dict, run: dict) -> dict:
    """Per variant its pipeline seconds and stage seconds; outside the variants: before the first, after the last."""
    variants, first, last = {}, None, None
    for name, record in results["variants"].items():
        ran = record.get("ran_on") or {}
        stages = ran.get("stages") or {}
        pipeline = ran.get("finished", 0) - ran.get("started", 0)
        variants[name] = {"status": record["status"], "pipeline": pipeline,
                          **{s: stages.get(s, 0.0) for s in (*STAGES, *BESIDE)},
                          "other": pipeline - sum(stages.get(s, 0.0) for s in STAGES)}
        first = ran.get("started") if first is None else min(first, ran.get("started", first))
        last = ran.get("finished") if last is None else max(last, ran.get("finished", last))
    end = run["started"] + run["wall_s"]
    return {"variants": variants, "before_variants": (first or end) - run["started"], "after_variants": end - (last or end)}


def measure(checkout: Path, recipe: Path, work: Path, only: list[str]) -> dict:
    out, cache = work / "run", work / "cache"
    cold = sweep(checkout, recipe, out, cache, only)
    results = json.loads((out / "results.json").read_text())
    warm = sweep(checkout, recipe, out, cache, only)
    return {"checkout": str(checkout), "cold": cold, "warm": warm, **breakdown(results, cold)}


def table(m: dict) -> list[str]:
    total = m["cold"]["wall_s"]
    summed = (*STAGES, "other", "pipeline")
    columns = (*summed, *BESIDE)
    head = ["variant", "status", *summed, *BESIDE.values()]
    rows = [[name, v["status"], *(f"{v.get(s, 0.0):.0f}" for s in columns)] for name, v in m["variants"].items()]
    sums = {s: sum(v.get(s, 0.0) for v in m["variants"].values()) for s in columns}
    rows.append(["all variants", "", *(f"{sums[s]:.0f}" for s in columns)])
    shares = [f"{sums[s] / total:.0%}" for s in summed]
    rows.append(["share of the sweep", "", *shares, *["(beside)"] * len(BESIDE)])
    width = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    lines = [f"## {m['checkout']}",
             f"cold sweep {total:.0f} s (exit {m['cold']['exit']}): start-up and checks {m['before_variants']:.0f} s, "
             f"variants {sums['pipeline']:.0f} s, reports and exit {m['after_variants']:.0f} s; "
             f"unchanged re-run {m['warm']['wall_s']:.1f} s",
             "  ".join(h.ljust(w) for h, w in zip(head, width))]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, width)) for r in rows]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recipe", type=Path)
    parser.add_argument("--checkout", type=Path, action="append",
                        help="a checkout with its own .venv (default: this one); repeat to compare, in order")
    parser.add_argument("--work", type=Path, help="where runs and caches go (default: a temporary directory)")
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    parser.add_argument("--only", nargs="+", metavar="VARIANT", help="sweep only these variants (quant sweep --only)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="sweep-time-"))
    measured = []
    for i, checkout in enumerate(args.checkout or [REPO]):
        checkout = checkout.resolve()
        recipe = args.recipe if args.recipe.is_absolute() else checkout / args.recipe   # each checkout's own
        m = measure(checkout, recipe, work / f"{i}", args.only)
        measured.append(m)
        print("\n".join(table(m)), flush=True)
    if args.json:
        args.json.write_text(json.dumps(measured, indent=2))


if __name__ == "__main__":
    sys.exit(main())
