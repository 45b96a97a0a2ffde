"""Run directories and stage caches on an fsspec URL (s3://, gs://, file://, any filesystem fsspec knows).

Engines, quantizers and lm-eval read and write local files, so every node works in a local mirror of the URL
(under $QUANT_MIRROR_DIR, default ~/.cache/quant-suite/mirrors) and the mirror is synced with the URL:
a finished stage is uploaded once by the node that built it and downloaded by any node that needs it.

Uploads keep the local guarantees: each file goes to a temporary name beside its target and is then moved
onto it (one object appears whole or not at all), and a stage's `done` marker is uploaded after everything
else, so a stage interrupted mid-upload is not taken for finished (it is redone and overwritten). A stage's
files go to a build directory of their own that the marker names: two nodes building the same stage at once
each publish a whole build, and a reader gets one of them, never a mix.
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from core.hashing import digest
from core.owners import owner_tag
from core.safe_paths import UnsafePath, checked_key, inside

_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
_TEMPORARY = re.compile(r"^\..+\.tmp$")
BUILD_PREFIX = ".build-"   # a cache entry's files at a URL: <entry>/.build-<owner>/..., named by its marker


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
            found = self.fs.exists(self.root)
            bucket = _bucket(self.fs, self.root)
            missing = not found and bucket is not None and not self.fs.exists(bucket)
        except Exception as exc:  # noqa: BLE001 - each filesystem raises its own kinds
            raise RemoteError(f"{self.url}: cannot reach it ({type(exc).__name__}: {exc})") from None
        if missing:   # a bucket is the user's to create (with its region, access and lifecycle), never ours
            raise RemoteError(f"{self.url}: the bucket {bucket!r} does not exist, or these credentials cannot see it")

    @contextmanager
    def _answering(self, what: str):
        """A store that stops answering mid-sweep (network, outage, credentials expired) as one RemoteError line."""
        try:
            yield
        except (FileNotFoundError, RemoteError):
            raise
        except Exception as exc:  # noqa: BLE001 - each filesystem raises its own kinds
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            raise RemoteError(f"{self.url}: {what} failed ({type(exc).__name__}: {first}); finished stages are "
                              "kept: re-run once it answers") from None

    def upload_file(self, local: Path, rel: str) -> None:
        """Atomic per file: to a temporary name, then moved onto the target."""
        target = self._abs(rel)
        parent, _, name = target.rpartition("/")
        temporary = f"{parent}/.{name}.{owner_tag()}.tmp"
        with self._answering(f"uploading {rel}"):
            self.fs.makedirs(parent, exist_ok=True)
            try:
                self.fs.put_file(str(local), temporary)
                self.fs.mv(temporary, target)
            except BaseException:
                with suppress(Exception):   # a store that stopped answering keeps it: readers skip temporaries
                    if self.fs.exists(temporary):
                        self.fs.rm(temporary)
                raise

    def upload_dir(self, local: Path, rel: str) -> None:
        """Every file under local to rel/... (a run's folder: each file is read on its own)."""
        for path in sorted(p for p in Path(local).rglob("*") if p.is_file() and not _TEMPORARY.match(p.name)):
            self.upload_file(path, f"{rel}/{path.relative_to(local).as_posix()}".lstrip("/"))

    def publish(self, local: Path, rel: str, marker: str) -> None:
        """A finished directory as one build: its files (its own marker among them) under rel/<build>/, then
        rel/<marker> naming the build.
        Two nodes publishing the same entry at once write a build each; the marker (one object, written whole)
        names one of them, so a reader gets one build's files, never some of each."""
        build = f"{BUILD_PREFIX}{owner_tag()}"
        files = list(Path(local).iterdir())   # the local marker too: its record of who wrote the entry
        for path in sorted(p for top in files for p in ([top] if top.is_file() else top.rglob("*")) if p.is_file()):
            if not _TEMPORARY.match(path.name):
                self.upload_file(path, f"{rel}/{build}/{path.relative_to(local).as_posix()}")
        pointer = Path(local) / f".{marker}.{owner_tag()}.tmp"
        pointer.write_text(build)
        try:
            self.upload_file(pointer, f"{rel}/{marker}")
        finally:
            pointer.unlink(missing_ok=True)

    def fetch(self, rel: str, local: Path, marker: str) -> bool:
        """The build rel/<marker> names, into local; False where there is no marker naming a build (nothing
        finished there)."""
        try:
            with self._answering(f"looking up {rel}"):
                build = self.fs.cat_file(self._abs(f"{rel}/{marker}")).decode().strip()
        except FileNotFoundError:
            return False
        if not build.startswith(BUILD_PREFIX):
            return False
        self.download_dir(f"{rel}/{build}", local)
        return True

    def download_dir(self, rel: str, local: Path) -> int:
        """Every finished file under rel into local (created as needed); the number of files."""
        with self._answering(f"downloading {rel or 'the run'}"):
            return self._download_dir(rel, local)

    def _download_dir(self, rel: str, local: Path) -> int:
        base = self._abs(rel)
        if not self.fs.isdir(base):
            return 0
        count = 0
        for remote_path in self.fs.find(base):
            if not remote_path.startswith(f"{base}/"):
                raise RemoteError(f"{self.url}: it lists {remote_path!r}, outside {rel or 'its root'}")
            relative = remote_path[len(base):].lstrip("/")
            name = relative.rsplit("/", 1)[-1]
            if _TEMPORARY.match(name) or relative.startswith(BUILD_PREFIX) or self._through_link(remote_path):
                continue
            target = local_target(self.url, Path(local), relative)
            target.parent.mkdir(parents=True, exist_ok=True)
            self.fs.get_file(remote_path, str(target))
            count += 1
        return count

    def _through_link(self, remote_path: str) -> bool:
        """Whether a listed file is, or lies under, a symbolic link below the root (a file:// run can hold one
        to a file of the user's that must never be copied into a run): such a file is not downloaded. Object
        stores have no links."""
        if not getattr(self.fs, "local_file", False):
            return False
        parts = remote_path[len(self.root):].strip("/").split("/")
        return any(os.path.islink(f"{self.root}/{'/'.join(parts[:n])}") for n in range(1, len(parts) + 1))


def _bucket(fs, root: str) -> str | None:
    """The bucket (container) of an object store's path; None for a file system, where folders are made as needed.
    Object stores are the filesystems that split paths into a bucket and a key (s3fs, gcsfs, adlfs)."""
    return root.split("/", 1)[0] if hasattr(fs, "split_path") and root else None


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
