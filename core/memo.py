"""Answers of slow, pure checks remembered by content, so that a run which changes nothing does not import
torch, transformers or lm-eval only to reach the answer it reached before (group sizes against a model's
shapes, scheme names, task names). The key holds everything the answer depends on: the inputs, the library
versions and the source of the code that computes it; a changed input is a new key, never a stale answer.

Kept under $QUANT_CHECK_CACHE (default ~/.cache/quant-suite/checks), one small JSON file per answer."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from core.hashing import digest, file_digest

T = TypeVar("T")


def memo_root() -> Path:
    return Path(os.environ.get("QUANT_CHECK_CACHE") or Path.home() / ".cache" / "quant-suite" / "checks")


def source_digest(*files: str | Path) -> str:
    """The version of the code behind an answer: its source files' contents."""
    return digest([file_digest(Path(f)) for f in files])


def remembered(kind: str, key: Any, compute: Callable[[], T]) -> T:
    """compute()'s answer (JSON: tuples come back as lists), stored under digest(kind, key) the first time."""
    path = memo_root() / kind / f"{digest(kind, key)}.json"
    try:
        return json.loads(path.read_text())["answer"]
    except (OSError, ValueError, KeyError):
        pass
    answer = compute()
    try:
        from core.store import write_json
        write_json(path, {"answer": answer})
    except OSError:   # an unwritable cache costs speed, never the answer
        pass
    return json.loads(json.dumps(answer))   # the same shape a remembered answer has
