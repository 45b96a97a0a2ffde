"""Who wrote a stage cache entry, and whether its files are still what they wrote.

A finished entry's `done` marker holds a record: the trust level of the run that wrote it (QUANT_CACHE_TRUST:
`trusted`, the default, or `pull-request` for a job running code nobody reviewed yet), the suite's version and
source digest, the stage and key it was written for, and a digest of the entry's files. A run reuses an entry
only if it was written for this stage and key, by a writer at least as trusted as the run itself, and its files
still match the digest; anything else (a marker without a record, another entry's build copied here, a less
trusted writer, a file changed since) is rebuilt, not served. Where the cache lives does not matter: the
record travels with the entry.

The record tells mistakes and unreviewed writers apart; it is not a signature. Against someone who can write
the directory on purpose, the directory's permissions are the protection (docs/deciding.md, "In CI").
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

from core.hashing import digest, file_digest, versions

TRUST_LEVELS = ("pull-request", "trusted")   # least trusted first
DEFAULT_TRUST = "trusted"
MARKER = "done"
_verified: dict[str, str] = {}   # entry path -> the files' stamp when this process last checked their contents


class TrustError(ValueError):
    """QUANT_CACHE_TRUST names no trust level."""


def current_trust() -> str:
    trust = os.environ.get("QUANT_CACHE_TRUST") or DEFAULT_TRUST
    if trust not in TRUST_LEVELS:
        raise TrustError(f"QUANT_CACHE_TRUST={trust!r} is not a trust level; use one of: {', '.join(TRUST_LEVELS)}")
    return trust


def seal(entry: Path, trust: str) -> str:
    """The record to write as the `done` marker of a finished entry (its files in place, the marker not yet)."""
    files = _files(entry)
    record = {"trust": trust, "suite": versions("quant-suite")["quant-suite"], "source": _source_digest(),
              "stage": entry.parent.name, "key": entry.name, "digest": _content(entry, files),
              "stamp": _stamp(entry, files)}
    _verified[str(entry)] = record["stamp"]
    return json.dumps(record, sort_keys=True) + "\n"


def refusal(entry: Path, record_text: str, trust: str) -> str | None:
    """Why a run at `trust` must not reuse this entry, or None. The files' contents are hashed only when they
    were touched since they were sealed (or since this process last checked them)."""
    try:
        record = json.loads(record_text)
        writer, sealed = record["trust"], record["digest"]
    except (ValueError, TypeError, KeyError):
        return "its marker records no writer (an older suite, or not written by one)"
    if (record.get("stage"), record.get("key")) != (entry.parent.name, entry.name):
        named = f"{record.get('stage')}/{record.get('key')}"[:120]
        return f"its record was written for {named!r}, not this entry (another entry's copy, or an older suite)"
    if writer not in TRUST_LEVELS or TRUST_LEVELS.index(writer) < TRUST_LEVELS.index(trust):
        return f"written by a {writer!r} run; this run is {trust!r}"
    files = _files(entry)
    stamp = _stamp(entry, files)
    if stamp in (record.get("stamp"), _verified.get(str(entry))):
        return None
    if _content(entry, files) != sealed:
        return "its files no longer match the digest they were written with"
    _verified[str(entry)] = stamp
    return None


def _files(entry: Path) -> list[Path]:
    """Every file the entry reaches, through symbolic links too (a checkpoint may link to weights elsewhere:
    their change must show); a directory reached twice (a link loop) is walked once."""
    found, walked = [], set()

    def walk(directory: Path) -> None:
        real = os.path.realpath(directory)
        if real in walked:
            return
        walked.add(real)
        for child in directory.iterdir():
            if child.is_dir():
                walk(child)
            elif child.is_file() and child != entry / MARKER:
                found.append(child)

    walk(entry)
    return sorted(found)


def _content(entry: Path, files: list[Path]) -> str:
    return digest([(str(p.relative_to(entry)), *_link_of(p), file_digest(p)) for p in files])


def _link_of(path: Path) -> tuple[str, ...]:
    """Where a file that is a symbolic link points, as part of what the entry is (its content is hashed too);
    nothing for a plain file, so entries without links keep the digests they were sealed with."""
    return (os.readlink(path),) if path.is_symlink() else ()


def _stamp(entry: Path, files: list[Path]) -> str:
    """Changes whenever any file is written, replaced, added or removed later than one tick of the file
    system's clock (a few ms) after the stamp was taken: ctime cannot be set back."""
    stats = [(str(p.relative_to(entry)), *_link_of(p), s.st_ino, s.st_size, s.st_mtime_ns, s.st_ctime_ns)
             for p in files for s in [p.stat()]]
    return digest(stats)


@functools.lru_cache(maxsize=1)
def _source_digest() -> str:
    root = Path(__file__).resolve().parent.parent
    sources = sorted(p for d in ("core", "quant", "quantize", "evals", "perf", "reports") for p in (root / d).rglob("*.py"))
    return digest([(str(p.relative_to(root)), file_digest(p)) for p in sources])
