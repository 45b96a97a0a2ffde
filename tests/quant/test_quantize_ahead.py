"""Quantizing ahead (quant/ahead.py): checkpoints built in the background in the sweep's order and handed over
in each variant's turn, a build's failure raised in that turn, every quantizer stopped while a perf stage runs
and resumed after, and nothing left running when the sweep ends. Real child processes stand in for quantizers:
they carry the quantize stage's environment marker and count time in a file."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from core.recipe import Recipe
from quant.ahead import QuantizeAhead, builds_ahead, wanted
from quant.context import StageError
from quant.progress import Reporter
from quantize.child_process import QUANTIZER_ENV

TICKER = "import sys, time\nwhile True:\n    open(sys.argv[1], 'a').write('.')\n    time.sleep(0.02)\n"


def recipe(*variants: dict, **execution) -> Recipe:
    return Recipe.model_validate({"name": "t", "model": "demo", "tasks": ["demo_math"], "execution": execution,
                                  "variants": [{"name": "bf16", "baseline": True}, *variants]})


@dataclass
class Context:   # what quant/ahead.py reads of a SweepContext
    recipe: Recipe
    reporter: Reporter
    engine_facts: dict
    model_dir: Path
    device: str = "cpu"


def context(r: Recipe, tmp_path: Path, device: str | None = "cpu") -> Context:
    return Context(r, Reporter(quiet=True), {"device": device}, tmp_path)


class Builds:
    """A quantize stage whose 'quantizer' is a real child process carrying the marker; it ticks into a file."""

    def __init__(self, tmp_path: Path, seconds: float = 0.3, failing: str | None = None, delay: float = 0):
        self.tmp_path, self.seconds, self.failing, self.delay = tmp_path, seconds, failing, delay
        self.order: list[str] = []
        self.threads: set[str] = set()
        self.nice: set[int] = set()

    def ticks(self, name: str) -> int:
        path = self.tmp_path / f"{name}.ticks"
        return len(path.read_text()) if path.exists() else 0

    def __call__(self, ctx, variant) -> str:
        import threading

        self.order.append(variant.name)
        self.threads.add(threading.current_thread().name)
        self.nice.add(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        time.sleep(self.delay)   # what the quantize stage does before its child runs (cache keys, a lock)
        proc = subprocess.Popen([sys.executable, "-c", TICKER, str(self.tmp_path / f"{variant.name}.ticks")],
                                env={**os.environ, QUANTIZER_ENV: "1"})
        self.nice.add(psutil.Process(proc.pid).nice())
        try:
            proc.wait(timeout=self.seconds)
        except subprocess.TimeoutExpired:
            proc.terminate()
            proc.wait()
        if variant.name == self.failing:
            raise StageError("quantization failed")
        return f"checkpoint of {variant.name}"


Q = {"scheme": "W8A8"}


def ticks_again(builds: Builds, name: str, frozen: int, seconds: float = 15) -> bool:
    """Whether a resumed quantizer ticks again: it runs at nice 19, maybe stopped mid-start-up, on a machine
    the other tests keep busy, so it is given time."""
    deadline = time.time() + seconds
    while builds.ticks(name) == frozen and time.time() < deadline:
        time.sleep(0.05)
    return builds.ticks(name) > frozen


def test_checkpoints_are_built_in_order_in_the_background_and_handed_over(tmp_path):
    r = recipe({"name": "a", **Q}, {"name": "b", **Q}, {"name": "c", **Q})
    builds = Builds(tmp_path, failing="b")
    ahead = QuantizeAhead(context(r, tmp_path), r.variants[1:], builds)
    try:
        assert ahead.checkpoint(r.variants[1]) == "checkpoint of a"
        with pytest.raises(StageError, match="quantization failed"):   # raised in its own turn, not before
            ahead.checkpoint(r.variants[2])
        assert ahead.checkpoint(r.variants[3]) == "checkpoint of c"
    finally:
        ahead.close()
    assert builds.order == ["a", "b", "c"] and all(n.startswith("quantize-ahead") for n in builds.threads)
    assert builds.nice <= {0, 19}   # each was waited for at once: maybe raised to ours before it started
    assert set(ahead.seconds) == {"a", "b", "c"} and min(ahead.seconds.values()) > 0
    assert ahead.checkpoint(r.variants[0]) == "checkpoint of bf16"   # not queued: built now, in the caller


def test_a_perf_stage_pauses_every_quantizer_and_they_resume_after(tmp_path):
    r = recipe({"name": "a", **Q}, {"name": "b", **Q})
    builds = Builds(tmp_path, seconds=30)
    ahead = QuantizeAhead(context(r, tmp_path), r.variants[1:], builds)
    try:
        deadline = time.time() + 20
        while builds.ticks("a") < 5 and time.time() < deadline:
            time.sleep(0.05)
        with ahead.paused():
            frozen = builds.ticks("a")
            time.sleep(0.5)
            assert builds.ticks("a") == frozen and builds.order == ["a"]
        assert ticks_again(builds, "a", frozen)
        assert builds.nice == {19}   # the lowest priority, inherited by the quantizer it starts
    finally:
        started = time.time()
        ahead.close()   # the running quantizer is stopped, the next never starts
    assert time.time() - started < 10 and builds.order == ["a"]
    after = builds.ticks("a")
    time.sleep(0.3)
    assert builds.ticks("a") == after > 0   # stopped for good


def test_no_quantizer_starts_while_paused(tmp_path):
    r = recipe({"name": "a", **Q}, {"name": "b", **Q})
    builds = Builds(tmp_path, seconds=0.2)
    ahead = QuantizeAhead(context(r, tmp_path), r.variants[1:], builds)
    try:
        with ahead.paused():
            time.sleep(1.0)   # a's build, if it had started, was stopped; b's cannot start
            assert builds.order in ([], ["a"]) and builds.ticks("b") == 0
        assert ahead.checkpoint(r.variants[2]) == "checkpoint of b"
    finally:
        ahead.close()


def test_a_build_starting_as_a_pause_begins_is_stopped_once_its_quantizer_shows(tmp_path):
    r = recipe({"name": "a", **Q})
    builds = Builds(tmp_path, seconds=30, delay=0.5)
    ahead = QuantizeAhead(context(r, tmp_path), r.variants[1:], builds)
    try:
        deadline = time.time() + 10
        while builds.order != ["a"] and time.time() < deadline:   # past the check, its child not yet started
            time.sleep(0.01)
        with ahead.paused():
            time.sleep(0.3)
            frozen = builds.ticks("a")
            time.sleep(0.5)
            assert builds.ticks("a") == frozen
        assert ticks_again(builds, "a", frozen)
    finally:
        ahead.close()


def test_what_is_built_ahead_and_where(tmp_path):
    r = recipe({"name": "q", **Q}, {"name": "mine", "checkpoint": str(tmp_path)},
               {"name": "ranked", **Q, "sensitivity": {"keep_top": 1}})
    assert [builds_ahead(v) for v in r.variants] == [False, True, False, False]
    assert wanted(context(r, tmp_path)) and not wanted(context(r, tmp_path, device="cuda"))
    assert not wanted(context(recipe(quantize_ahead=False), tmp_path))
    assert wanted(context(recipe(quantize_ahead=True), tmp_path, device="cuda"))


class Lines(Reporter):
    def __init__(self):
        super().__init__(quiet=True)
        self.lines: list[str] = []

    def log(self, message: str, style: str | None = None) -> None:
        self.lines.append(message)


def running_quantizer(builds: Builds, name: str) -> psutil.Process:
    deadline = time.time() + 20
    while builds.ticks(name) < 2 and time.time() < deadline:
        time.sleep(0.05)
    kids = [p for p in psutil.Process().children(recursive=True) if QUANTIZER_ENV in p.environ()]
    assert kids, "the quantizer never started"
    return kids[0]


def test_a_build_the_sweep_waits_for_is_raised_back_to_the_sweeps_priority(tmp_path):
    """The priority inversion: a turn that waits on a build at nice 19 would wait behind every other process
    of the host. Here (root) Linux lets the sweep raise it back."""
    r = recipe({"name": "a", **Q})
    builds = Builds(tmp_path, seconds=8)   # alive until looked at, on a loaded machine too (Python starts slowly)
    reporter = Lines()
    ahead = QuantizeAhead(Context(r, reporter, {"device": "cpu"}, tmp_path), r.variants[1:], builds)
    try:
        quantizer = running_quantizer(builds, "a")
        assert quantizer.nice() == 19
        if os.geteuid() != 0:
            pytest.skip("raising a priority needs root here")
        assert ahead.raise_priority() and quantizer.nice() == os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, ahead._thread_id) == os.getpriority(os.PRIO_PROCESS, 0)  # its thread
        assert ahead.checkpoint(r.variants[1]) == "checkpoint of a"
        assert any("raised to the sweep's priority" in line for line in reporter.lines), reporter.lines
        assert builds.nice == {19}   # it started low
    finally:
        ahead.close()


def test_where_linux_refuses_to_raise_a_priority_the_build_stays_low_and_the_log_says_why(tmp_path, monkeypatch):
    import quant.ahead as ahead_module

    def refuse(which, who, nice):
        if nice < 19:
            raise PermissionError(13, "Permission denied")
        return os_setpriority(which, who, nice)

    os_setpriority = os.setpriority
    r = recipe({"name": "a", **Q})
    builds = Builds(tmp_path, seconds=8)
    reporter = Lines()
    monkeypatch.setattr(ahead_module.os, "setpriority", refuse)
    ahead = QuantizeAhead(Context(r, reporter, {"device": "cpu"}, tmp_path), r.variants[1:], builds)
    try:
        quantizer = running_quantizer(builds, "a")
        assert ahead.checkpoint(r.variants[1]) == "checkpoint of a"
    finally:
        ahead.close()
    assert builds.nice == {19}
    assert any("raising a priority needs root or RLIMIT_NICE" in line for line in reporter.lines), reporter.lines
