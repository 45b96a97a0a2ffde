"""Where a sweep's time goes: one recipe from an empty cache, then an unchanged re-run, per checkout.

For each checkout given (default: this one) the recipe is swept into a fresh run directory and stage cache, so
every stage is really done; then the same command again, which finds everything cached. Printed: the wall time
of both runs, and per variant the seconds of each stage (quantize, engine start, in-process model load, evals,
KL, perf: `ran_on.stages` in results.json) with their share of the sweep, plus what lies outside the variants
(start-up and validation before the first, reports after the last). "quantized ahead" is quantization done in
the background while earlier variants were measured (quant/ahead.py), "started ahead" a server's start-up beside
the previous variant's evals (quant/start_ahead.py): beside the stages, not part of the sum; what a variant still
waited for them is its "quantize" and "engine start". Several checkouts (say a worktree of an
older commit and this one) run one after another on the same machine, so their numbers are side by side;
`--ahead on off` sweeps each checkout once per setting of `execution.quantize_ahead` (a copy of the recipe beside
it, removed after), in that order.

While a cold sweep runs, its process tree is sampled every 2 s: the CPU seconds taken by the quantizers (what
`python -m quantize` started) and by the engines (what a vLLM server started) while both ran, with each one's
niceness, autogroup and thread count as first seen beside the other: whether work built ahead yields to the
measured variant.

Usage: python benchmarks/sweep_time.py RECIPE [--checkout DIR ...] [--ahead on|off ...] [--work DIR]
       [--json FILE] [--only VARIANT ...]           (a relative RECIPE is read from each checkout)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import yaml

REPO = Path(__file__).resolve().parent.parent
STAGES = ("quantize", "engine_start", "model_load", "evals", "kl", "perf")
# done in the background while earlier variants were measured: quantization, a server's start-up
BESIDE = {"quantize_ahead": "quantized ahead", "engine_start_ahead": "started ahead"}
SAMPLE_S = 2.0
QUANTIZER_ENV = "QUANT_QUANTIZER"   # quantize/child_process.py marks every quantizer's environment with it


def kind_of(proc: psutil.Process) -> str | None:
    """"quantizer", "engine" (a vLLM server's process) or None, for a process of the sweep's tree."""
    try:
        argv = " ".join(proc.cmdline()[:6])
        if "lifeline.py" in argv:
            return None
        if proc.environ().get(QUANTIZER_ENV):
            return "quantizer"
        if "vllm" in argv or proc.name().startswith("VLLM"):
            return "engine"
    except psutil.Error:
        pass
    return None


def autogroup(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/autogroup").read_text().strip() or "root"
    except OSError:
        return "none"


class TreeSampler:
    """CPU seconds of the sweep's quantizers and engines over the samples where both ran, and how each was
    scheduled when first seen running beside the other."""

    def __init__(self, root: int):
        self.root = root
        self.last: dict[int, float] = {}
        self.beside = {"quantizer": 0.0, "engine": 0.0, "wall": 0.0}
        self.seen: dict[str, tuple[int, str]] = {}   # kind and name -> (threads, how it was scheduled)

    def sample(self, dt: float) -> None:
        try:
            tree = psutil.Process(self.root).children(recursive=True)
        except psutil.Error:
            return
        took = {"quantizer": 0.0, "engine": 0.0}
        states: dict[str, tuple[int, str]] = {}
        for proc in tree:
            kind = kind_of(proc)
            if kind is None:
                continue
            try:
                cpu = sum(proc.cpu_times()[:2])
                threads = proc.threads()
                nice = sorted({os.getpriority(os.PRIO_PROCESS, t.id) for t in threads})
            except (psutil.Error, OSError):
                continue
            took[kind] += cpu - self.last.get(proc.pid, cpu)
            self.last[proc.pid] = cpu
            states[f"{kind} {proc.name()}"] = (len(threads), f"nice {nice}, {len(threads)} threads, "
                                                            f"autogroup {autogroup(proc.pid)}")
        if all(took.values()):
            for kind, seconds in took.items():
                self.beside[kind] += seconds
            self.beside["wall"] += dt
            # as first seen beside each other (a quantizer once its threads have started): a build the sweep
            # waits on later is raised back to the sweep's priority, which is not how it ran beside a model
            for key, (threads, state) in states.items():
                first = self.seen.get(key)
                if first is None or key.startswith("quantizer") and first[0] == 1 < threads:
                    self.seen[key] = (threads, state)

    def summary(self) -> dict:
        return {"cpu_s_while_both_ran": {k: round(v, 1) for k, v in self.beside.items()},
                "sweep_autogroup": autogroup(self.root), "scheduling": {key: state for key, (_, state) in self.seen.items()}}


def sweep(checkout: Path, recipe: Path, out: Path, cache: Path, only: list[str]) -> dict:
    """One `quant sweep` with the checkout's code and environments; its wall time, start and exit code. Models
    converted on load (a GGUF file dequantized) go to a cache beside the stage cache: empty at first, as on a
    fresh machine."""
    env = {**os.environ, "PYTHONPATH": str(checkout), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "QUANT_MODEL_CACHE": str(cache.parent / "models")}
    started = time.time()
    argv = [str(checkout / ".venv/bin/python"), "-m", "quant.cli", "sweep", str(recipe), "--out", str(out),
            "--cache-dir", str(cache), "--quiet", *(["--only", *only] if only else [])]
    err = out.parent / "sweep.stderr"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(err, "w") as stderr:
        proc = subprocess.Popen(argv, cwd=checkout, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        sampler = TreeSampler(proc.pid)
        while proc.poll() is None:
            time.sleep(SAMPLE_S)
            sampler.sample(SAMPLE_S)
    wall = time.time() - started
    if proc.returncode not in (0, 1):
        raise SystemExit(f"sweep with {checkout} failed ({proc.returncode}):\n{err.read_text()[-3000:]}")
    return {"wall_s": wall, "started": started, "exit": proc.returncode, **sampler.summary()}


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


def measure(checkout: Path, recipe: Path, work: Path, only: list[str], ahead: str | None) -> dict:
    out, cache = work / "run", work / "cache"
    with recipe_with_ahead(recipe, ahead) as swept:
        cold = sweep(checkout, swept, out, cache, only)
        results = json.loads((out / "results.json").read_text())
        warm = sweep(checkout, swept, out, cache, only)
    label = str(checkout) + ("" if ahead is None else f", quantize_ahead {ahead}")
    return {"checkout": label, "cold": cold, "warm": warm, **breakdown(results, cold)}


class recipe_with_ahead:
    """The recipe itself (ahead None), or a copy beside it (relative paths in it still resolve) with
    execution.quantize_ahead set, removed on exit."""

    def __init__(self, recipe: Path, ahead: str | None):
        self.recipe, self.ahead, self.copy = recipe, ahead, None

    def __enter__(self) -> Path:
        if self.ahead is None:
            return self.recipe
        data = yaml.safe_load(self.recipe.read_text())
        data.setdefault("execution", {})["quantize_ahead"] = self.ahead == "on"
        fd, name = tempfile.mkstemp(prefix=f".{self.recipe.stem}-ahead-{self.ahead}-", suffix=".yaml",
                                    dir=self.recipe.parent)
        with os.fdopen(fd, "w") as f:
            yaml.safe_dump(data, f, sort_keys=False)
        self.copy = Path(name)
        return self.copy

    def __exit__(self, *_: object) -> None:
        if self.copy is not None:
            self.copy.unlink(missing_ok=True)


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
    both = m["cold"].get("cpu_s_while_both_ran") or {}
    if both.get("wall"):
        lines.append(f"while a quantizer ran beside a served model ({both['wall']:.0f} s): engine "
                     f"{both['engine']:.0f} CPU-s, quantizer {both['quantizer']:.0f} CPU-s "
                     f"({both['quantizer'] / (both['engine'] + both['quantizer']):.0%} of theirs)")
    lines += [f"  {kind}: {state}" for kind, state in (m["cold"].get("scheduling") or {}).items()]
    if m["cold"].get("sweep_autogroup"):
        lines.append(f"  the sweep: autogroup {m['cold']['sweep_autogroup']}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recipe", type=Path)
    parser.add_argument("--checkout", type=Path, action="append",
                        help="a checkout with its own .venv (default: this one); repeat to compare, in order")
    parser.add_argument("--work", type=Path, help="where runs and caches go (default: a temporary directory)")
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    parser.add_argument("--only", nargs="+", metavar="VARIANT", help="sweep only these variants (quant sweep --only)")
    parser.add_argument("--ahead", nargs="+", choices=("on", "off"),
                        help="sweep once per execution.quantize_ahead setting, in this order (default: the recipe's)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # killed: the recipe copy is still removed
    work = args.work or Path(tempfile.mkdtemp(prefix="sweep-time-"))
    measured = []
    runs = [(c, a) for c in (args.checkout or [REPO]) for a in (args.ahead or [None])]
    for i, (checkout, ahead) in enumerate(runs):
        checkout = checkout.resolve()
        recipe = args.recipe if args.recipe.is_absolute() else checkout / args.recipe   # each checkout's own
        m = measure(checkout, recipe, work / f"{i}", args.only, ahead)
        measured.append(m)
        print("\n".join(table(m)), flush=True)
        if args.json:   # after each: a long comparison keeps what it measured so far
            args.json.write_text(json.dumps(measured, indent=2))


if __name__ == "__main__":
    sys.exit(main())
