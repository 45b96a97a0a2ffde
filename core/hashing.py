"""Content keys for the stage cache: everything that changes a stage's output goes into its key."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
from pathlib import Path
from typing import Any

CONTENT_HASH_LIMIT = 256 << 20  # bigger files are keyed by name, size and mtime (hashing GBs is slow)


def digest(*parts: Any) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(json.dumps(part, sort_keys=True, default=str).encode())
        h.update(b"\0")
    return h.hexdigest()[:20]


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tree_digest(root: Path) -> str:
    """Digest of a directory's files (names and contents), or of a single file."""
    root = Path(root)
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    entries = []
    for p in files:
        stat = p.stat()
        rel = p.name if p == root else str(p.relative_to(root))
        if stat.st_size <= CONTENT_HASH_LIMIT:
            entries.append((rel, file_digest(p)))
        else:
            entries.append((rel, stat.st_size, stat.st_mtime_ns))
    return digest(entries)


def versions(*dists: str) -> dict[str, str | None]:
    return {name: _version(name) for name in dists}


@functools.lru_cache(maxsize=None)
def _version(name: str) -> str | None:
    """An installed distribution's version, read once per process (package metadata: milliseconds each)."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None
