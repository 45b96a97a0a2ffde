"""Engines started ahead (quant/start_ahead.py): the next variant's server starts once one is ready and is handed
over in that variant's turn; none starts while a perf stage runs (one starting is waited for first); one that
failed, died or was not wanted is never handed over; nothing is left running when the sweep ends. The servers
here are stand-ins whose start-up the test holds and releases (the whole path on real processes and HTTP runs in
tests/quant/test_sweep_standin.py)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from core.recipe import Recipe
from perf.engines.process import EngineStartError
from quant.progress import Reporter
from quant.start_ahead import StartAhead, wanted


def recipe(tmp_path: Path, names=("a", "b", "c"), **execution) -> Recipe:
    variants = []
    for name in names:
        (tmp_path / name).mkdir(exist_ok=True)
        variants.append({"name": name, "checkpoint": str(tmp_path / name)})
    return Recipe.model_validate({"name": "t", "model": "demo", "tasks": ["demo_math"], "execution": execution,
                                  "variants": [{"name": "bf16", "baseline": True}, *variants]})


@dataclass
class Context:   # what quant/start_ahead.py reads of a SweepContext
    recipe: Recipe
    reporter: Reporter
    engine_facts: dict
    model_dir: Path
    ahead: object = None


class Server:
    """Starts when the test releases it (or at once), fails or dies on request; records what happened to it."""

    def __init__(self, path: Path, log_path: Path, hold: threading.Event, fails: Exception | None = None):
        self.model_path, self.log_path, self.hold, self.fails = path, log_path, hold, fails
        self.events: list[str] = []
        self.dead = False

    def start(self) -> None:
        self.events.append("start")
        self.hold.wait(10)
        if self.fails:
            raise self.fails
        self.events.append("ready")

    def stop(self) -> None:
        self.events.append("stop")

    def death(self, wait_s: float = 0.0) -> str | None:
        return "killed" if self.dead else None


class Servers:
    """The `prepare` of quant/measure.py: a server per variant (None where `skip` names it)."""

    def __init__(self, tmp_path: Path, skip=(), failing: dict[str, Exception] | None = None):
        self.tmp_path, self.skip, self.failing = tmp_path, set(skip), failing or {}
        self.made: dict[str, Server] = {}
        self.hold = threading.Event()

    def __call__(self, ctx, variant, checkpoint):
        if variant.name in self.skip:
            return None
        server = Server(checkpoint.path, self.tmp_path / f"{variant.name}.log", self.hold,
                        self.failing.get(variant.name))
        self.made[variant.name] = server
        return server


def until(condition, timeout: float = 5.0) -> bool:
    deadline = time.time() + timeout
    while not condition() and time.time() < deadline:
        time.sleep(0.01)
    return condition()


def start_ahead(tmp_path: Path, servers: Servers, **execution) -> tuple[StartAhead, list]:
    r = recipe(tmp_path, **execution)
    ctx = Context(r, Reporter(quiet=True), {"device": "cpu"}, tmp_path)
    return StartAhead(ctx, r.variants, servers), r.variants


def test_the_next_server_starts_once_one_is_ready_and_is_handed_over(tmp_path):
    servers = Servers(tmp_path)
    starts, (bf16, a, b, c) = start_ahead(tmp_path, servers)
    servers.hold.set()
    starts.begin_after(bf16)
    assert until(lambda: "ready" in servers.made.get("a", Server(None, None, None)).events)
    assert set(servers.made) == {"a"}   # only the next one
    started = starts.take(a, tmp_path / "a")
    assert started.server is servers.made["a"] and started.seconds >= 0
    assert servers.made["a"].events == ["start", "ready"]   # the turn stops it, not this
    starts.begin_after(a)
    assert until(lambda: "ready" in servers.made.get("b", Server(None, None, None)).events)
    starts.close()
    assert servers.made["b"].events == ["start", "ready", "stop"]   # started, never taken: stopped
    assert "c" not in servers.made


def test_no_server_starts_while_a_perf_stage_runs_and_one_starting_is_waited_for(tmp_path):
    servers = Servers(tmp_path)
    starts, (bf16, a, b, c) = start_ahead(tmp_path, servers)
    with starts.quiet():   # perf of bf16
        starts.begin_after(bf16)
        time.sleep(0.3)
        assert "a" not in servers.made or servers.made["a"].events == []
    assert until(lambda: servers.made["a"].events == ["start"])   # began once the perf stage ended
    entered = []
    quiet = threading.Thread(target=lambda: starts.quiet().__enter__() or entered.append(time.time()))
    quiet.start()
    time.sleep(0.3)
    assert not entered   # a perf stage waits for the start in progress
    released = time.time()
    servers.hold.set()
    quiet.join(5)
    assert entered and entered[0] >= released and servers.made["a"].events == ["start", "ready"]
    starts.close()


def test_a_server_that_failed_or_died_or_came_too_late_is_not_handed_over(tmp_path):
    servers = Servers(tmp_path, failing={"a": RuntimeError("lost its port")})
    starts, (bf16, a, b, c) = start_ahead(tmp_path, servers)
    servers.hold.set()
    starts.begin_after(bf16)
    assert until(lambda: "stop" in servers.made.get("a", Server(None, None, None)).events)
    assert starts.take(a, tmp_path / "a") is None   # the turn starts its own and reports its failure

    starts.begin_after(a)
    assert until(lambda: "ready" in servers.made.get("b", Server(None, None, None)).events)
    servers.made["b"].dead = True
    assert starts.take(b, tmp_path / "b") is None and servers.made["b"].events[-1] == "stop"

    assert starts.take(c, tmp_path / "c") is None   # its turn came first: none is started for it later
    starts.begin_after(b)
    time.sleep(0.2)
    assert "c" not in servers.made
    starts.close()


def test_nothing_starts_where_the_turn_would_start_nothing(tmp_path):
    servers = Servers(tmp_path, skip={"a"})   # cached, or known to be refused
    starts, (bf16, a, b, c) = start_ahead(tmp_path, servers)
    servers.hold.set()
    starts.begin_after(bf16)
    time.sleep(0.2)
    assert servers.made == {} and starts.take(a, tmp_path / "a") is None
    starts.close()


def test_a_start_in_progress_is_stopped_when_the_sweep_ends(tmp_path):
    servers = Servers(tmp_path)
    starts, (bf16, a, b, c) = start_ahead(tmp_path, servers)
    starts.begin_after(bf16)
    assert until(lambda: servers.made.get("a") and servers.made["a"].events == ["start"])
    closing = threading.Thread(target=starts.close)
    closing.start()
    time.sleep(0.2)
    servers.hold.set()   # the stand-in only notices its stop once released
    closing.join(10)
    assert not closing.is_alive() and servers.made["a"].events.count("stop") >= 1


def test_the_engines_refusal_is_the_turns_answer_without_a_second_start(tmp_path):
    servers = Servers(tmp_path, failing={"a": EngineStartError("Failed to find a kernel for uint8b128",
                                                               blames="checkpoint")})
    starts, (bf16, a, b, c) = start_ahead(tmp_path, servers)
    starts.begin_after(bf16)
    assert until(lambda: servers.made.get("a") and servers.made["a"].events == ["start"])
    threading.Timer(0.2, servers.hold.set).start()
    with pytest.raises(EngineStartError, match="uint8b128"):
        starts.take(a, tmp_path / "a")   # waits for the start in progress, then answers as a start would
    assert servers.made["a"].events == ["start"]

    servers.failing["b"] = EngineStartError("engine not ready within 600 s", timed_out=True)
    starts.begin_after(a)
    assert until(lambda: servers.made.get("b") and servers.made["b"].events == ["start"])
    assert starts.take(b, tmp_path / "b") is None   # slow beside the evals, perhaps not alone: the turn tries

    # short of memory beside the server in use, blaming neither the recipe nor the checkpoint: the turn tries
    servers.failing["c"] = EngineStartError("ValueError: Available memory on node 0 (0.5/23.54 GiB) on kv cache "
                                            "allocation is less than requested memory for kv (1.0 GiB)")
    starts.begin_after(b)
    assert until(lambda: servers.made.get("c") and servers.made["c"].events == ["start"])
    assert starts.take(c, tmp_path / "c") is None
    starts.close()


@pytest.mark.parametrize("device, setting, expected", [("cpu", None, True), ("cuda", None, False), (None, None, False),
                                                        ("cpu", False, False), ("cuda", True, True)])
def test_where_servers_are_started_ahead(tmp_path, device, setting, expected):
    r = recipe(tmp_path, start_ahead=setting)
    assert wanted(Context(r, Reporter(quiet=True), {"device": device}, tmp_path)) is expected
