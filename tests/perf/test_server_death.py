"""A server is one process tree: when any of its vital processes dies, the lifeline ends the rest and removes its
shared memory, and says in the server's log which process died and how. Fast: a stand-in tree shaped like
vLLM's (server -> engine core -> worker, titled as vLLM titles them); tests/perf/test_engine_death.py kills
the real engine's processes."""

from __future__ import annotations

import os
import re
import signal
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from perf.engines.process import command_pid, spawn, stop_group
from perf.engines.vllm import VLLMServer
from tests.helpers import DEMO_MODEL, REPO

# role server starts Core, Core starts Work; Work maps a shared-memory segment, as vLLM's worker does. Nobody
# waits for its child: a killed child stays a zombie, as under a busy parent. Core and Work retitle themselves
# as vLLM's setproctitle does, which overwrites the memory /proc/<pid>/environ shows.
TREE = textwrap.dedent("""
    import ctypes, os, subprocess, sys, time
    role, out = sys.argv[1], sys.argv[2]
    child = {"server": "Core", "Core": "Work"}.get(role)
    if child:
        subprocess.Popen([sys.executable, __file__, child, out])
    if role != "server":
        with open("/proc/self/comm", "w") as f:
            f.write("STANDIN::" + role)
        fields = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
        env_start, env_end = int(fields[47]), int(fields[48])
        ctypes.memset(env_start, 0, env_end - env_start)
    if role == "Work":
        from multiprocessing import resource_tracker, shared_memory
        segment = shared_memory.SharedMemory(create=True, size=1 << 20)
        resource_tracker.unregister(segment._name, "shared_memory")   # left behind when killed
        open(out + ".shm", "w").write("/dev/shm/" + segment.name)
    open(out + "." + role, "w").write(str(os.getpid()))
    time.sleep(300)
""")
ROLES = ("server", "Core", "Work")


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_for(path: Path, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists() or not path.read_text():
        assert time.monotonic() < deadline, f"{path} never written"
        time.sleep(0.05)
    return path.read_text()


def start_tree(tmp_path: Path):
    script = tmp_path / "tree.py"
    script.write_text(TREE)
    out = tmp_path / "pids"
    log = tmp_path / "server.log"
    lifeline = spawn([sys.executable, str(script), "server", str(out)], dict(os.environ), log, grace_s=15,
                     vital=("STANDIN::",))
    pids = {role: int(_wait_for(Path(f"{out}.{role}"))) for role in ROLES}
    shm = _wait_for(Path(f"{out}.shm"))
    time.sleep(1.5)   # the lifeline notes its tree's processes once a second
    return lifeline, pids, shm, log


@pytest.mark.parametrize("victim", ROLES)
def test_the_death_of_any_process_of_a_server_takes_down_the_rest(tmp_path, victim):
    lifeline, pids, shm, log = start_tree(tmp_path)
    assert os.path.exists(shm)
    os.kill(pids[victim], signal.SIGKILL)
    lifeline.wait(timeout=20)   # not the 15 s grace of a requested stop: a dead server has nothing to drain
    assert not [role for role, pid in pids.items() if _running(pid)]
    assert not os.path.exists(shm)
    title = "the server python" if victim == "server" else f"STANDIN::{victim}"
    note = f"lifeline: {title} (pid {pids[victim]}) was killed by signal 9; stopping the rest of its process tree"
    assert note in log.read_text().splitlines(), log.read_text()


def test_a_requested_stop_is_no_death(tmp_path):
    lifeline, pids, shm, log = start_tree(tmp_path)
    stop_group(lifeline, grace_s=5)
    assert not [role for role, pid in pids.items() if _running(pid)] and not os.path.exists(shm)
    assert "lifeline:" not in log.read_text()


def test_a_killed_lifeline_leaves_no_orphan_of_its_tree(tmp_path):
    """A supervisor may SIGKILL the lifeline itself (Ray kills the processes its workers started): the server
    dies with it (PDEATHSIG), and its rearguard ends the engine core and worker, which had moved to init."""
    lifeline, pids, shm, log = start_tree(tmp_path)
    lifeline.kill()
    lifeline.wait(timeout=5)
    deadline = time.monotonic() + 20
    while (left := [role for role, pid in pids.items() if _running(pid)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, f"{left} outlived their SIGKILLed lifeline"
    said = r"lifeline: the launcher was killed; ended \d+ orphaned process"
    while not re.search(said, log.read_text()) and time.monotonic() < deadline:   # said once the shm is removed
        time.sleep(0.05)
    assert re.search(said, log.read_text()), log.read_text()
    assert not os.path.exists(shm)


def test_stopping_a_server_whose_lifeline_was_killed_returns_once_nothing_of_it_is_left(tmp_path):
    """What the sweep does before it restarts a dead server, or exits: stop it. With its lifeline SIGKILLed, the
    retitled engine core and worker are orphans; the stop returns only once they are gone and their segment too."""
    lifeline, pids, shm, log = start_tree(tmp_path)
    lifeline.kill()
    lifeline.wait(timeout=5)
    stop_group(lifeline, grace_s=5)
    assert not [role for role, pid in pids.items() if _running(pid)] and not os.path.exists(shm)


def test_a_live_server_is_not_waited_for_and_a_dead_one_is_named(tmp_path):
    """After a failed request the sweep asks whether the server died under it (death(wait_s)): a server that
    answers /health and whose lifeline noted no death is alive at once, not after wait_s; a dead one is named."""
    python = tmp_path / "standin-python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{REPO / "tests" / "standin_engine.py"}" "$@"\n')
    python.chmod(0o755)
    with VLLMServer(DEMO_MODEL, python=str(python), served_name="demo", args={}, env={}, startup_timeout_s=60,
                    log_path=tmp_path / "server.log") as server:
        started = time.monotonic()
        assert server.death(wait_s=30) is None
        assert time.monotonic() - started < 10
        os.kill(command_pid(server._proc), signal.SIGKILL)
        reason = server.death(wait_s=30)
    assert reason is not None and "was killed by signal 9" in reason, reason
