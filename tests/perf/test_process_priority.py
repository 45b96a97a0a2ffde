"""A build started at a lowered priority keeps it against other sessions (Linux's autogroup shares the CPU
between sessions before niceness counts), so a quantizer built ahead yields to the served model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from perf.engines.process import AUTOGROUP

REPO = Path(__file__).resolve().parents[2]
REPORT = ("import os; from perf.engines.process import keep_low_priority_across_sessions as keep; "
          "print(keep(), os.getsid(0) == os.getpid(), open('/proc/self/autogroup').read())")


def run(nice: int) -> list[str]:
    out = subprocess.run([sys.executable, "-c", REPORT], cwd=REPO, text=True, capture_output=True, check=True,
                         preexec_fn=lambda: os.nice(nice))
    return out.stdout.strip().split(maxsplit=2)


@pytest.mark.skipif(not AUTOGROUP.exists(), reason="this kernel has no autogroup: niceness alone orders processes")
def test_a_niced_process_leads_its_own_session_at_its_niceness_and_a_normal_one_stays():
    leads, is_leader, group = run(19)
    assert (leads, is_leader) == ("True", "True") and group.endswith("nice 19"), group
    leads, is_leader, _ = run(0)
    assert (leads, is_leader) == ("False", "False")
