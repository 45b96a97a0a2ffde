"""`--executor local` against `--executor ray` on one recipe and one machine, each from an empty cache.

Runs the recipe twice (fresh run directories and caches, so every stage is really done), then prints the wall
time of each sweep, each variant's pipeline time, its perf stage time and the speed-up measured here. It also
computes the speed-up a node with N accelerator slots would get from the LOCAL run's per-variant times: the
baseline alone first, then the other variants spread over N slots (longest first), with perf stages never
overlapping on the node (they queue behind one lock). That estimate assumes each variant has its own
accelerator; on a CPU-only machine variants side by side share the same cores, so the measured speed-up there
is bounded by the cores, not by N — the two numbers are printed apart and labelled.

Usage: python benchmarks/executor_speedup.py [--recipe benchmarks/executor_speedup.yaml] [--slots 2 4 8] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def sweep(recipe: Path, executor: str, work: Path) -> tuple[float, dict]:
    out, cache = work / executor / "run", work / executor / "cache"
    started = time.time()
    proc = subprocess.run([sys.executable, "-m", "quant.cli", "sweep", str(recipe), "--executor", executor,
                           "--out", str(out), "--cache-dir", str(cache), "--quiet"], cwd=REPO, text=True,
                          capture_output=True)
    wall = time.time() - started
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{executor} sweep failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall, json.loads((out / "results.json").read_text())


def stage_times(results: dict) -> dict[str, dict[str, float]]:
    """variant -> seconds of its whole pipeline and of its stages (quantize: the library's own time; evals:
    every task's; perf: every workload's, lock wait excluded; the rest is server start, KL and bookkeeping)."""
    times = {}
    for name, record in results["variants"].items():
        ran = record.get("ran_on") or {}
        perf = sum(p["placement"]["finished"] - p["placement"]["started"]
                   for p in record.get("perf", {}).values() if p.get("placement"))
        evals = sum((a.get("metrics") or {}).get("eval_seconds", 0) for a in record.get("accuracy", {}).values())
        quantize = (record.get("manifest") or {}).get("quantization_seconds") or 0
        times[name] = {"pipeline": ran.get("finished", 0) - ran.get("started", 0), "quantize": quantize,
                       "evals": evals, "perf": perf}
    return times


def node_estimate(results: dict, slots: int) -> float:
    """Makespan on one node with `slots` accelerators: the baseline, then longest-first over the slots; perf
    stages serialised by the node's perf lock (a lower bound of that queue: the sum of the perf stages)."""
    times = stage_times(results)
    baseline = results["baseline"]
    others = sorted((t for name, t in times.items() if name != baseline), key=lambda t: -t["pipeline"])
    finish = [0.0] * slots
    for t in others:
        finish[finish.index(min(finish))] += t["pipeline"]
    fan_out = max(max(finish, default=0.0), sum(t["perf"] for t in others))
    return times[baseline]["pipeline"] + fan_out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="benchmarks/executor_speedup.yaml")
    parser.add_argument("--slots", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--work", help="where the two runs go (default: a temporary directory)")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="executor-speedup-"))
    recipe = (REPO / args.recipe).resolve()
    local_wall, local = sweep(recipe, "local", work)
    ray_wall, on_ray = sweep(recipe, "ray", work)
    print(f"recipe {args.recipe}: {len(local['variants'])} variants; runs in {work}")
    stages = ("pipeline", "quantize", "evals", "perf")
    print("\n| variant | executor | " + " | ".join(f"{s} s" for s in stages) + " | node |")
    print("|---|---|" + "---|" * len(stages) + "---|")
    for executor, results in (("local", local), ("ray", on_ray)):
        for name, t in stage_times(results).items():
            node = (results["variants"][name].get("ran_on") or {}).get("node", "-")
            print(f"| {name} | {executor} | " + " | ".join(f"{t[s]:.1f}" for s in stages) + f" | {node} |")
    print(f"\nmeasured on this machine: local {local_wall:.0f} s, ray {ray_wall:.0f} s: "
          f"speed-up {local_wall / ray_wall:.2f}x")
    serial = sum(t["pipeline"] for t in stage_times(local).values())
    for slots in args.slots:
        estimate = node_estimate(local, slots)
        print(f"computed for a node with {slots} accelerators (from the local run's per-variant times): "
              f"{estimate:.0f} s of {serial:.0f} s of pipelines: speed-up {serial / estimate:.2f}x")


if __name__ == "__main__":
    main()
