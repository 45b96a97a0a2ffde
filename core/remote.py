"""Run directories and stage caches on an fsspec URL (s3://, gs://, file://, any filesystem fsspec knows).

Engines, quantizers and lm-eval read and write local files, so every node works in a local mirror of the URL
(under $QUANT_MIRROR_DIR, default ~/.cache/quant-suite/mirrors) and the mirror is synced with the URL:
a finished stage is uploaded once by the node that built it and downloaded by any node that needs it.

Uploads keep the local guarantees: each file goes to a temporary name beside its target and is then moved
onto it (one object appears whole or not at all), and a stage's `done` marker is uploaded after everything
else, so a stage interrupted mid-upload is not taken for finished (it is redone and overwritten).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from core.hashing import digest
from core.owners import owner_tag
from core.safe_paths import UnsafePath, checked_key, inside

_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
_TEMPORARY = re.compile(r"^\..+\.tmp$")


class RemoteError(ValueError):
    """A location fsspec cannot open (unknown protocol, its filesystem package missing, a malformed URL)."""


def is_url(location: str | Path) -> bool:
    return isinstance(location, str) and bool(_URL.match(location))


def mirror_root() -> Path:
    return Path(os.environ.get("QUANT_MIRROR_DIR") or Path.home() / ".cache" / "quant-suite" / "mirrors")


class Remote:
    """One fsspec location; paths below it are '/'-separated and relative."""

    def __init__(self, url: str) -> None:
        import fsspec   # with transformers and datasets; s3fs / gcsfs are the user's to install

        self.url = url.rstrip("/")
        try:
            self.fs, self.root = fsspec.core.url_to_fs(self.url)
        except (ImportError, ValueError) as exc:
            raise RemoteError(f"{url}: fsspec cannot open this location ({exc}); for s3:// install s3fs, "
                             f"for gs:// gcsfs") from None
        self.root = self.root.rstrip("/")

    def __repr__(self) -> str:
        return f"Remote({self.url!r})"

    def __reduce__(self):   # a filesystem object need not pickle; the URL does (Ray ships it to workers)
        return Remote, (self.url,)

    def _abs(self, rel: str) -> str:
        return f"{self.root}/{remote_key(rel)}" if rel else self.root

    def probe(self) -> None:
        """One request, before any work: credentials, bucket and network problems surface here, as one error."""
        try:
            self.fs.exists(self.root)
        except Exception as exc:  # noqa: BLE001 - each filesystem raises its own kinds
            raise RemoteError(f"{self.url}: cannot reach it ({type(exc).__name__}: {exc})") from None

    def exists(self, rel: str) -> bool:
        return self.fs.exists(self._abs(rel))

    def upload_file(self, local: Path, rel: str) -> None:
        """Atomic per file: to a temporary name, then moved onto the target."""
        target = self._abs(rel)
        parent, _, name = target.rpartition("/")
        temporary = f"{parent}/.{name}.{owner_tag()}.tmp"
        self.fs.makedirs(parent, exist_ok=True)
        try:
            self.fs.put_file(str(local), temporary)
            self.fs.mv(temporary, target)
        except BaseException:
            if self.fs.exists(temporary):
                self.fs.rm(temporary)
            raise

    def upload_dir(self, local: Path, rel: str, last: str | None = None) -> None:
        """Every file under local to rel/...; `last` (a marker) after all others."""
        files = sorted(p for p in Path(local).rglob("*") if p.is_file() and not _TEMPORARY.match(p.name))
        files.sort(key=lambda p: p.name == last and p.parent == Path(local))
        for path in files:
            self.upload_file(path, f"{rel}/{path.relative_to(local).as_posix()}".lstrip("/"))

    def download_dir(self, rel: str, local: Path, skip: frozenset[str] = frozenset()) -> int:
        """Every finished file under rel into local (created as needed); the number of files."""
        base = self._abs(rel)
        if not self.fs.isdir(base):
            return 0
        count = 0
        for remote_path in self.fs.find(base):
            if not remote_path.startswith(f"{base}/"):
                raise RemoteError(f"{self.url}: it lists {remote_path!r}, outside {rel or 'its root'}")
            relative = remote_path[len(base):].lstrip("/")
            name = relative.rsplit("/", 1)[-1]
            if relative in skip or _TEMPORARY.match(name):
                continue
            target = local_target(self.url, Path(local), relative)
            target.parent.mkdir(parents=True, exist_ok=True)
            self.fs.get_file(remote_path, str(target))
            count += 1
        return count


def remote_key(rel: str) -> str:
    """The one check of every key read from or written to a remote: relative, no '..', no empty part;
    RemoteError (one line) otherwise."""
    try:
        return checked_key(rel, "remote key")
    except UnsafePath as exc:
        raise RemoteError(str(exc)) from None


def local_target(url: str, local: Path, relative: str) -> Path:
    """Where a downloaded key lands in the mirror: inside it, never through a symbolic link out of it."""
    remote_key(relative)
    try:
        return inside(local, relative, f"{url}: key")
    except UnsafePath as exc:
        raise RemoteError(str(exc)) from None


@dataclass(frozen=True)
class Location:
    """Where a run directory or cache lives: a local path, or a URL and this node's mirror of it."""
    local: Path
    remote: Remote | None = None

    def __str__(self) -> str:
        return self.remote.url if self.remote else str(self.local)


def locate(where: str | Path, kind: str) -> Location:
    """kind ('runs', 'cache') keeps a run's mirror apart from a cache's of the same URL."""
    if not is_url(str(where)):
        return Location(Path(where))
    if str(where).startswith("file://") and not str(where).startswith("file:///"):
        raise RemoteError(f"{where}: a file URL needs an absolute path (file:///...)")
    remote = Remote(str(where))
    remote.probe()
    return Location(mirror_root() / kind / digest(remote.url)[:16], remote)


def pull_run(where: str) -> Location:
    """A run directory at a URL, brought into this node's mirror (results, per-item files, reports)."""
    location = locate(where, "runs")
    location.remote.download_dir("", location.local)
    return location
