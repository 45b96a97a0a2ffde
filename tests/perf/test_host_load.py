"""Foreign load: a perf level measured while another process burns CPU is flagged; our own tree's work is not
foreign. The burner is a real process, started outside (or inside) our process tree: a fake only for the fault."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager

from core.recipe_perf import Workload
from core.results import PerfPoint
from perf.host_load import FOREIGN_CORES_LIMIT, CpuReading, host_busy_s, host_load, process_cpu_s, read_cpu
from perf.run import run_workload

BURN = "import time\nend = time.time() + 600\nwhile time.time() < end: pass"
# ~2 s of measured requests against the fake (20 ms per token, one at a time)
LEVEL = Workload(name="w", prompt_tokens=8, output_tokens=10, concurrency=[1], requests_per_level=10,
                 warmup_requests=0)


@contextmanager
def burner(outside_our_tree: bool):
    """A process that keeps one core busy; outside our tree it is reparented away from us (double fork)."""
    if outside_our_tree:
        out = subprocess.run(["sh", "-c", f"{sys.executable} -c '{BURN}' >/dev/null 2>&1 & echo $!"],
                             capture_output=True, text=True, check=True)
        pid = int(out.stdout.strip())
    else:
        pid = subprocess.Popen([sys.executable, "-c", BURN]).pid
    try:
        time.sleep(0.3)   # running before the level starts
        yield pid
    finally:
        os.kill(pid, signal.SIGKILL)
        if not outside_our_tree:
            os.waitpid(pid, 0)


def test_a_level_measured_beside_a_cpu_burner_is_flagged(fake, tokenizer_dir):
    with burner(outside_our_tree=True):
        res = run_workload(fake.url, "m", tokenizer_dir, LEVEL)
    load = res["points"][0]["host_load"]
    assert load["foreign_load"] is True and load["foreign_cores"] >= FOREIGN_CORES_LIMIT, load
    assert load["wall_s"] > 1 and load["loadavg_1m"] >= 0 and load["cpus"] == os.cpu_count()
    assert any("c=1: measured under foreign load" in w for w in res["warnings"]), res["warnings"]
    assert PerfPoint.model_validate(res["points"][0]).foreign_load


def test_work_of_our_own_process_tree_is_not_foreign(fake, tokenizer_dir):
    with burner(outside_our_tree=False) as pid:
        before, burned_before = read_cpu(), process_cpu_s(pid)
        time.sleep(2)
        burned, after = process_cpu_s(pid) - burned_before, read_cpu()
        level = run_workload(fake.url, "m", tokenizer_dir, LEVEL)["points"][0]["host_load"]
    load = host_load(before, after)
    # all our child burned in the window is counted as ours (CPU ticks are read a moment apart: 0.05 s slack)
    assert burned > 0.1 and load["own_cpu_s"] >= burned - 0.05, (load, burned)
    assert abs(load["foreign_cpu_s"] - (load["host_busy_cpu_s"] - load["own_cpu_s"])) < 0.01
    assert level["own_cpu_s"] > 0 and level["wall_s"] > 1, level


def test_the_flag_is_the_foreign_share_against_the_limit():
    reading = lambda at, busy, own: CpuReading(at=at, host_busy_s=busy, own_s=own, cpus=2)
    clean = host_load(reading(0, 100, 10), reading(2, 103.5, 13.0))   # others took 0.5 s over 2 s
    assert clean["foreign_cores"] == 0.25 and clean["foreign_load"] is False
    loaded = host_load(reading(0, 100, 10), reading(2, 104.0, 12.0))   # others took 2 s over 2 s
    assert loaded["foreign_cores"] == 1.0 and loaded["foreign_load"] is True
    assert host_load(reading(0, 100, 10), reading(2, 100, 12))["foreign_cpu_s"] == 0   # never negative


def test_proc_stat_counts_busy_time_of_every_cpu():
    text = "cpu  100 10 50 1000 20 5 5 3 0 0\ncpu0 50 5 25 500 10 2 3 1 0 0\ncpu1 50 5 25 500 10 3 2 2 0 0\nintr 1\n"
    busy, cpus = host_busy_s(text)
    assert cpus == 2 and abs(busy - 173 / os.sysconf("SC_CLK_TCK")) < 1e-9   # idle and iowait are not busy
    assert read_cpu().cpus == os.cpu_count()
