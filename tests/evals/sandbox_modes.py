"""Running generated code as if bubblewrap were missing (the user opted in to the fallback): a fault injected on
purpose, since this machine has bubblewrap; the fallback's layers are this machine's real ones."""

import contextlib
import dataclasses

from evals import execute, fallback, hostile, integrity, sandbox

MODES = ["bubblewrap", "opted-in-fallback"]


def act_without_bubblewrap(monkeypatch, caps: sandbox.Capabilities) -> None:
    for module in (execute, hostile, integrity, sandbox):
        monkeypatch.setattr(module, "capabilities", lambda: caps)


def fallback_here() -> sandbox.Capabilities:
    """What this machine gives without bubblewrap: its cgroups and the fallback layers its kernel allows."""
    return dataclasses.replace(sandbox.capabilities(), bwrap=None, layers=fallback.available_layers())


@contextlib.contextmanager
def running_in(mode: str, monkeypatch):
    if mode == "bubblewrap":
        yield
        return
    act_without_bubblewrap(monkeypatch, fallback_here())
    with sandbox.permit_unisolated(True):
        yield
