"""Which tests start engine servers: where QUANT_TEST_ENGINE_STARTS is set, each pytest process watches its own
process tree every POLL_S seconds and records with every test (a `engine_starts` property, in the junit XML
`make test` writes) the vLLM and llama.cpp servers that appeared while the test, its set-up or its teardown ran
(a module fixture's server counts with the first test that uses it). A server that lives less than POLL_S may
be missed: the count is of servers seen. A server is a python run with `-m` and a server's module: not its
launcher, whose command line names the server's after its own, nor an interpreter asked about vLLM's flags.
`python benchmarks/suite_durations.py` prints the counts per part and file."""

from __future__ import annotations

import os
import threading

import psutil
import pytest

POLL_S = 1.0
SERVERS = ("vllm.entrypoints.openai.api_server", "llama_cpp.server")


def module_run(argv: list[str]) -> str | None:
    """The module a python command line runs (`python [options] -m MODULE ...`), None where it runs a script or
    code."""
    for i, arg in enumerate(argv[1:], start=1):
        if arg == "-m":
            return argv[i + 1] if i + 1 < len(argv) else None
        if not arg.startswith("-") or arg == "-c":
            return None
    return None


def wanted() -> bool:
    return bool(os.environ.get("QUANT_TEST_ENGINE_STARTS"))


class ServerWatch:
    """New engine servers among this process's descendants, counted since the last `take()`."""

    def __init__(self) -> None:
        self._seen: set[int] = set()
        self._new = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        threading.Thread(target=self._watch, name="engine-starts", daemon=True).start()

    def _watch(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(POLL_S):
            self.look(me)

    def look(self, root: psutil.Process) -> None:
        try:
            children = root.children(recursive=True)
        except psutil.Error:
            return
        for child in children:
            if child.pid in self._seen:
                continue
            try:
                module = module_run(child.cmdline())
            except psutil.Error:
                continue
            if module in SERVERS:
                with self._lock:
                    self._seen.add(child.pid)
                    self._new += 1

    def take(self) -> int:
        self.look(psutil.Process())
        with self._lock:
            new, self._new = self._new, 0
        return new

    def stop(self) -> None:
        self._stop.set()


_watch: ServerWatch | None = None


def pytest_sessionstart(session) -> None:
    global _watch
    if wanted():
        _watch = ServerWatch()


def pytest_sessionfinish(session) -> None:
    if _watch is not None:
        _watch.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if _watch is not None:
        _watch.take()   # what started between tests is nobody's
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    if _watch is not None:
        item.user_properties.append(("engine_starts", _watch.take()))
