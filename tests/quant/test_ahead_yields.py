"""A quantizer built ahead yields to the served variant beside it: the scheduling state that makes it yield is
read off the real processes (no timing). The quantizer is the quantize stage's own child (`python -m quantize`
behind its lifeline, as the sweep starts it); the served variant is a command behind a lifeline as vLLM is.

Every thread of the quantizer (its supervisor and the worker that imports torch) runs at nice 19; where Linux
shares the CPU between autogroups first, the quantizer leads an autogroup of its own at nice 19, apart from the
sweep's and the engine's (a niceness counts only within its autogroup: a nice-19 build in a group at nice 0
takes an equal share of the CPU from the engine's group)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import psutil
import pytest

from core.recipe import Calibration, Variant
from perf.engines.process import AUTOGROUP, process_tree, spawn, stop_group
from quant.ahead import NICE, QuantizeAhead, quantizers
from quant.progress import Reporter
from quantize.child_process import quantize_in_subprocess
from tests.helpers import DEMO_MODEL
from tests.quant.test_quantize_ahead import Context, recipe

pytestmark = pytest.mark.slow

VARIANT = {"name": "w4a16-gptq", "scheme": "W4A16", "algorithm": "gptq", "ignore": ["lm_head"]}


def autogroup(pid: int) -> str:
    """`/autogroup-N nice K` (empty in the kernel's root task group, or without autogroup)."""
    try:
        return Path(f"/proc/{pid}/autogroup").read_text().strip()
    except OSError:
        return ""


def quantizer_tree(timeout_s: float = 300) -> list[psutil.Process]:
    """The running quantizer's processes (`python -m quantize` and, once started, its worker; not the lifeline
    that watches them) once it has settled its priority: its autogroup's niceness set, or its worker started
    (where it could not set one). At nice 19 on a busy machine that may take a while: it yields to everything."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        tree = quantizers()
        settled = [p for p in tree if "--in-process" in _cmdline(p) or autogroup(p.pid).endswith(f"nice {NICE}")]
        if settled:
            return tree
        time.sleep(0.2)
    raise AssertionError("the quantizer never started")


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def test_a_quantizer_built_ahead_beside_a_served_variant_yields_to_it(tmp_path):
    served = spawn([sys.executable, "-c", "import time; time.sleep(300)"], dict(os.environ), tmp_path / "server.log")
    r = recipe(VARIANT)
    variant = Variant.model_validate(VARIANT)

    def build(ctx, v):
        return quantize_in_subprocess(DEMO_MODEL, v, Calibration(num_samples=8, max_seq_length=64),
                                      tmp_path / "checkpoint", log_path=tmp_path / "quantize.log")

    ahead = QuantizeAhead(Context(r, Reporter(quiet=True), {"device": "cpu"}, tmp_path), [variant], build)
    try:
        tree = quantizer_tree()
        engine = process_tree(served.pid)[1:]   # the lifeline's command and what it started
        for proc in tree:
            threads = {t.id: os.getpriority(os.PRIO_PROCESS, t.id) for t in proc.threads()}
            assert set(threads.values()) == {NICE}, (proc.cmdline()[:4], threads)
        if not AUTOGROUP.exists():
            return   # no autogroup on this kernel: niceness alone orders the threads
        mine = autogroup(os.getpid())
        for proc in tree:
            group = autogroup(proc.pid)
            assert group.endswith(f"nice {NICE}") and group != mine, (proc.cmdline()[:4], group, mine)
        for proc in engine:
            group = autogroup(proc.pid)
            assert group.endswith("nice 0") and group not in {autogroup(p.pid) for p in tree}, group
    finally:
        ahead.close()
        stop_group(served, grace_s=1)
