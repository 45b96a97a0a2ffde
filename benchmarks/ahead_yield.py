"""Does a checkpoint built ahead yield to the served variant beside it? Measured side by side in one run.

A vLLM server (the demo model by default) answers a steady load of completions (eval-like: short prompts,
greedy, 32 tokens, `--concurrency` at a time) while the sweep's own quantize-ahead machinery (quant/ahead.py, the
real `python -m quantize` behind its lifeline) builds GPTQ checkpoints of the same model one after another.
Windows of `--window` seconds alternate: the quantizer paused (SIGSTOP, as during a perf stage) and running.
Per window: completions per second, and the CPU seconds the engine's and the quantizer's processes took.
Alternating windows keep a slowly changing foreign load from deciding the ratio.

Printed: the served rate beside a running quantizer over the rate with it paused (median of the window pairs,
and each pair), the quantizer's share of the CPU the two took while both ran, and how each was scheduled
(niceness, autogroup, thread count). Run it with another checkout first on PYTHONPATH to compare code:
    PYTHONPATH=OTHER_CHECKOUT .venv/bin/python benchmarks/ahead_yield.py

Usage: python benchmarks/ahead_yield.py [--model DIR] [--pairs N] [--window S] [--concurrency C] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

from core.recipe import Calibration, Recipe, Variant
from perf.engines.vllm import VLLMServer, resolve_engine_python
from quant.ahead import QuantizeAhead, quantizers
from quant.progress import Reporter
from quantize.child_process import quantize_in_subprocess

REPO = Path(__file__).resolve().parent.parent

BUILDS = 12   # queued one after another, so a quantizer is running in every window
PROMPTS = [f"Question: what is {a} + {b}?\nAnswer:" for a in range(10, 40) for b in range(3, 9)]


@dataclass
class Context:   # what quant/ahead.py reads of a sweep's context
    recipe: Recipe
    reporter: Reporter
    engine_facts: dict
    model_dir: Path
    device: str = "cpu"


def tree_cpu(pids: list[psutil.Process]) -> float:
    total = 0.0
    for p in pids:
        try:
            total += sum(p.cpu_times()[:2])
        except psutil.Error:
            pass
    return total


def scheduling(procs: list[psutil.Process]) -> list[str]:
    lines = []
    for p in procs:
        try:
            nice = sorted({os.getpriority(os.PRIO_PROCESS, t.id) for t in p.threads()})
            group = Path(f"/proc/{p.pid}/autogroup").read_text().strip() if Path("/proc/self/autogroup").exists() else "-"
            lines.append(f"{' '.join(p.cmdline()[1:3])[:40]}: nice {nice}, {p.num_threads()} threads, {group}")
        except (psutil.Error, OSError):
            pass
    return lines


class Load:
    """`concurrency` threads sending completions until stopped; `done` counts the answered ones."""

    def __init__(self, url: str, concurrency: int):
        self.url, self.done, self.stop = url, 0, threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(concurrency)]
        for t in self.threads:
            t.start()

    def _run(self, i: int) -> None:
        with httpx.Client(timeout=120, trust_env=False) as client:
            n = i
            while not self.stop.is_set():
                body = {"model": "demo", "prompt": PROMPTS[n % len(PROMPTS)], "max_tokens": 32, "temperature": 0,
                        "ignore_eos": True}
                client.post(self.url, json=body).raise_for_status()
                with self.lock:
                    self.done += 1
                n += len(self.threads)

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=REPO / "demo/model")
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--window", type=float, default=20.0)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ahead-yield-"))
    recipe = Recipe.model_validate({"name": "y", "model": str(args.model), "tasks": ["demo_math"],
                                    "variants": [{"name": "bf16", "baseline": True}]})
    server = VLLMServer(args.model, python=resolve_engine_python(None), served_name="demo", env={},
                        startup_timeout_s=900, args={"max_model_len": 512, "enforce_eager": True},
                        log_path=work / "server.log", engine_core_nice=10, device="cpu")
    server.start()
    variants = [Variant.model_validate({"name": f"gptq-{i}", "scheme": "W4A16", "algorithm": "gptq",
                                        "ignore": ["lm_head"]}) for i in range(BUILDS)]

    def build(ctx, variant):
        return quantize_in_subprocess(args.model, variant, Calibration(num_samples=64, max_seq_length=256),
                                      work / variant.name, log_path=work / f"{variant.name}.log")

    ahead = QuantizeAhead(Context(recipe, Reporter(quiet=True), {"device": "cpu"}, args.model), variants, build)
    load = Load(f"{server.base_url}/v1/completions", args.concurrency)
    windows, seen = [], []
    try:
        deadline = time.monotonic() + 300
        while not quantizers() and time.monotonic() < deadline:   # the first quantizer has started
            time.sleep(0.5)
        time.sleep(5)
        engine = psutil.Process(server.pid)
        for _ in range(args.pairs):
            for running in (False, True):
                with ahead.paused() if not running else nullcontext():
                    engine_tree = [engine, *engine.children(recursive=True)]
                    quant_tree = quantizers()
                    seen = seen or (scheduling(engine_tree) + scheduling(quant_tree) if running else [])
                    done0, e0, q0, t0 = load.done, tree_cpu(engine_tree), tree_cpu(quant_tree), time.monotonic()
                    time.sleep(args.window)
                    dt = time.monotonic() - t0
                    windows.append({"quantizer": "running" if running else "paused", "seconds": round(dt, 2),
                                    "completions_per_s": round((load.done - done0) / dt, 3),
                                    "engine_cpu_s": round(tree_cpu(engine_tree) - e0, 2),
                                    "quantizer_cpu_s": round(tree_cpu(quant_tree) - q0, 2),
                                    "load_avg_1m": os.getloadavg()[0]})
                    print(json.dumps(windows[-1]), flush=True)
    finally:
        load.close()
        ahead.close()
        server.stop()
    pairs = [(windows[i]["completions_per_s"], windows[i + 1]["completions_per_s"]) for i in range(0, len(windows), 2)]
    ratios = [b / a for a, b in pairs if a]
    running = [w for w in windows if w["quantizer"] == "running"]
    q, e = sum(w["quantizer_cpu_s"] for w in running), sum(w["engine_cpu_s"] for w in running)
    summary = {"served_rate_beside_over_paused": round(statistics.median(ratios), 3),
               "pairs": [round(r, 3) for r in ratios], "quantizer_share_of_cpu_while_both_ran": round(q / (q + e), 3),
               "scheduling": seen, "windows": windows}
    print(f"served rate beside a running quantizer / paused: median {summary['served_rate_beside_over_paused']:.3f} "
          f"(pairs {', '.join(f'{r:.3f}' for r in ratios)}); the quantizer took {q / (q + e):.1%} of the CPU the "
          f"two used while it ran ({q:.0f} of {q + e:.0f} CPU-s)")
    print("\n".join(f"  {line}" for line in seen))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
