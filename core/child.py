"""Model work in a child process, so that the sweep's own process never holds a model or initialises CUDA: what
the child allocated (on a GPU, the caching allocator's whole pool) is returned when it exits, before the next
stage starts an engine that checks the GPU's free memory.

`Child(factory, *args)` starts a fresh interpreter (multiprocessing's spawn: nothing of the parent's state, the
parent's environment, CUDA_VISIBLE_DEVICES included), builds `factory(*args)` there and answers `call(method,
...)` on it; `call_in_child(fn, ...)` runs one function. The child dies with its parent (the kernel sends it
SIGKILL when the parent ends, even SIGKILLed). What the child reports on the way, through `report(...)`, reaches
the parent's `on_report`. A failure in the child comes back as ChildError with its one-line reason."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
from collections.abc import Callable
from typing import Any

PR_SET_PDEATHSIG = 1
STOP_S = 10.0
_conn = None   # in a child: the connection to the parent, for report()


class ChildError(RuntimeError):
    """The child's work failed (the message is its exception as "Type: message"), or the child died."""


def report(*values: Any) -> None:
    """In a child: pass values to the parent's on_report (nothing outside a child)."""
    if _conn is not None:
        _conn.send(("report", values))


def _die_with_parent(parent: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):   # not Linux: the parent stops it on its way out
        return
    if os.getppid() != parent:   # the parent ended before prctl took effect
        os._exit(1)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__


def _serve(conn, parent: int, factory: Callable, args: tuple, kwargs: dict) -> None:
    global _conn
    _die_with_parent(parent)
    _conn = conn
    try:
        target = factory(*args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - every failure goes back as the reason
        conn.send(("error", _reason(exc)))
        return
    conn.send(("result", None))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        name, call_args, call_kwargs = message
        try:
            conn.send(("result", getattr(target, name)(*call_args, **call_kwargs)))
        except BaseException as exc:  # noqa: BLE001
            conn.send(("error", _reason(exc)))


class Child:
    """`factory(*args, **kwargs)` living in a child process; `with Child(...) as child: child.call("m", x)`."""

    def __init__(self, factory: Callable, *args: Any, on_report: Callable[..., None] | None = None, **kwargs: Any):
        context = multiprocessing.get_context("spawn")
        self._conn, theirs = context.Pipe()
        self.on_report = on_report
        self._process = context.Process(target=_serve, args=(theirs, os.getpid(), factory, args, kwargs),
                                        daemon=True, name="quant-child")
        self._process.start()
        theirs.close()
        try:
            self._answer()
        except BaseException:
            self.close()
            raise

    def _answer(self) -> Any:
        while True:
            try:
                kind, value = self._conn.recv()
            except (EOFError, OSError):
                self._process.join(STOP_S)
                code = self._process.exitcode
                how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
                raise ChildError(f"the child process died ({how})") from None
            if kind == "report":
                if self.on_report is not None:
                    self.on_report(*value)
            elif kind == "error":
                raise ChildError(value)
            else:
                return value

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        self._conn.send((method, args, kwargs))
        return self._answer()

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def close(self) -> None:
        """Ask the child to exit; SIGKILL where it does not within STOP_S."""
        if self._process.is_alive():
            try:
                self._conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            self._process.join(STOP_S)
            if self._process.is_alive():
                self._process.kill()
                self._process.join()
        self._conn.close()

    def __enter__(self) -> "Child":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Call:
    def __init__(self, fn: Callable, args: tuple, kwargs: dict):
        self.result = fn(*args, **kwargs)

    def get(self) -> Any:
        return self.result


def call_in_child(fn: Callable, *args: Any, on_report: Callable[..., None] | None = None, **kwargs: Any) -> Any:
    """fn(*args, **kwargs) in a child process (fn and its arguments picklable); its result, or ChildError."""
    with Child(_Call, fn, args, kwargs, on_report=on_report) as child:
        return child.call("get")
