"""A build started at a lowered priority keeps it against other sessions (Linux's autogroup shares the CPU
between sessions before niceness counts), so a quantizer built ahead yields to the served model."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from perf.engines.process import AUTOGROUP
from tests.helpers import REPO

# A process in the kernel's root task group (a session no autogroup was made for, as under some CI runners)
# reads /proc/self/autogroup as empty; JSON keeps that distinct from a missing field.
REPORT = ("import json, os; from perf.engines.process import keep_low_priority_across_sessions as keep; "
          "print(json.dumps([keep(), os.getsid(0) == os.getpid(), open('/proc/self/autogroup').read().strip()]))")


def run(nice: int) -> list:
    out = subprocess.run([sys.executable, "-c", REPORT], cwd=REPO, text=True, capture_output=True, check=True,
                         preexec_fn=lambda: os.nice(nice))
    return json.loads(out.stdout)


@pytest.mark.skipif(not AUTOGROUP.exists(), reason="this kernel has no autogroup: niceness alone orders processes")
def test_a_niced_process_leads_its_own_session_at_its_niceness_and_a_normal_one_stays():
    leads, is_leader, group = run(19)
    assert (leads, is_leader) == (True, True) and group.endswith("nice 19"), group
    leads, is_leader, _ = run(0)
    assert (leads, is_leader) == (False, False)
