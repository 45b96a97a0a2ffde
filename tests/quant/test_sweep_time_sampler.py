"""benchmarks/sweep_time.py's process sampler reports how a quantizer was scheduled while it ran beside a
served model, not how it ended: a build the sweep waits on is raised back to the sweep's priority later."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from benchmarks.sweep_time import QUANTIZER_ENV, TreeSampler

SPIN = "import threading\ndef spin():\n    while True: pass\n"
# a quantizer: one spinning thread beside the main one, a second after a line on stdin (its threads' count
# changes as a raised priority would: the report must keep the first state seen beside the engine)
QUANTIZER = SPIN + ("import sys\nthreading.Thread(target=spin, daemon=True).start()\nprint('ok', flush=True)\n"
                    "sys.stdin.readline()\nthreading.Thread(target=spin, daemon=True).start()\n"
                    "print('ok', flush=True)\nsys.stdin.readline()\n")
ENGINE = SPIN + "spin()\n"


def _both_sampled(sampler: TreeSampler) -> None:
    sampler.sample(0.3)
    time.sleep(0.3)
    sampler.sample(0.3)


def test_the_quantizers_scheduling_is_the_one_first_seen_beside_the_engine():
    engine = subprocess.Popen([sys.executable, "-c", ENGINE, "vllm"])
    quantizer = subprocess.Popen([sys.executable, "-c", QUANTIZER], env={**os.environ, QUANTIZER_ENV: "1"},
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        sampler = TreeSampler(os.getpid())
        assert quantizer.stdout.readline() == "ok\n"
        _both_sampled(sampler)
        quantizer.stdin.write("\n")
        quantizer.stdin.flush()
        assert quantizer.stdout.readline() == "ok\n"
        _both_sampled(sampler)
        summary = sampler.summary()
    finally:
        for proc in (engine, quantizer):
            proc.kill()
            proc.wait()
    quantizer_state = [state for key, state in summary["scheduling"].items() if key.startswith("quantizer")]
    assert quantizer_state and "2 threads" in quantizer_state[0], summary
    both = summary["cpu_s_while_both_ran"]
    assert both["engine"] > 0 and both["quantizer"] > 0 and both["wall"] > 0
