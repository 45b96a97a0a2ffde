"""Run directories and stage caches on an fsspec URL (s3://, gs://, file://, any filesystem fsspec knows).

Engines, quantizers and lm-eval read and write local files, so every node works in a local mirror of the URL
(under $QUANT_MIRROR_DIR, default ~/.cache/quant-suite/mirrors) and the mirror is synced with the URL:
a finished stage is uploaded once by the node that built it and downloaded by any node that needs it.

Uploads keep the local guarantees: each file goes to a temporary name beside its target and is then moved
onto it (one object appears whole or not at all), and a stage's `done` marker is uploaded after everything
else, so a stage interrupted mid-upload is not taken for finished (it is redone and overwritten). A stage's
files go to a build directory of their own that the marker names: two nodes building the same stage at once
each publish a whole build, and a reader gets one of them, never a mix.

Nothing here creates a bucket (an object store's folders need no making; a bucket is the user's), a download
that comes back shorter than the listing said is an error, not a file, and a run is mirrored only as far as
its own results.json names (its variants' folders): other keys under its prefix are never listed.
"""

from __future__ import annotations

import json
import os
import re
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from core.hashing import digest
from core.run_layout import RESULTS_FILE
from core.owners import owner_tag
from core.safe_paths import UnsafePath, checked_key, checked_name, inside

_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
_TEMPORARY = re.compile(r"^\..+\.tmp$")
BUILD_PREFIX = ".build-"   # a cache entry's files at a URL: <entry>/.build-<owner>/..., named by its marker
_BUILD = re.compile(r"^\.build-[A-Za-z0-9_.-]{1,200}$")   # what a marker may name: one part, no '/'


class RemoteError(ValueError):
    """A location fsspec cannot open (unknown protocol, its filesystem package missing, a malformed URL)."""


class UnusableEntry(Exception):
    """A cache entry's marker that names no build this suite could have written (not UTF-8, not one
    `.build-*` part, a build that is not there): nothing finished there."""


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
            raise self._no_bucket(bucket)

    def _no_bucket(self, bucket: str) -> RemoteError:
        return RemoteError(f"{self.url}: the bucket {bucket!r} does not exist, or these credentials cannot see it")

    @property
    def _object_store(self) -> bool:
        return _bucket(self.fs, self.root) is not None

    def _gone(self, exc: FileNotFoundError) -> RemoteError | FileNotFoundError:
        """A write that found no bucket: the bucket was deleted (or access to it revoked) mid-sweep."""
        bucket = _bucket(self.fs, self.root)
        with suppress(Exception):
            if bucket is not None and not self.fs.exists(bucket):
                return self._no_bucket(bucket)
        return exc

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
        with self._answering(f"uploading {rel}"), self._bucket_kept():
            if not self._object_store:   # s3fs's makedirs creates a missing bucket: never ours to create
                self.fs.makedirs(parent, exist_ok=True)
            try:
                self.fs.put_file(str(local), temporary)
                self.fs.mv(temporary, target)
            except BaseException:
                with suppress(Exception):   # a store that stopped answering keeps it: readers skip temporaries
                    if self.fs.exists(temporary):
                        self.fs.rm(temporary)
                raise

    @contextmanager
    def _bucket_kept(self):
        try:
            yield
        except FileNotFoundError as exc:
            raise self._gone(exc) from None

    def read_whole(self, rel: str) -> tuple[bytes | None, str | None]:
        """An object's bytes and its version tag (an ETag, where the store has them); (None, None) where there is
        none. RemoteError where fewer bytes came back than the store says it holds."""
        path = self._abs(rel)
        with self._answering(f"reading {rel}"):
            try:
                self.fs.invalidate_cache(path)   # the size and version now, not those of an earlier listing
                info = self.fs.info(path)
                data = self.fs.cat_file(path)
            except FileNotFoundError as exc:
                gone = self._gone(exc)
                if isinstance(gone, RemoteError):
                    raise gone from None
                return None, None
        size = info.get("size")
        if isinstance(size, int) and len(data) != size:
            raise RemoteError(f"{self.url}: {rel} came back with {len(data)} of its {size} bytes; nothing was "
                              "replaced: re-run once it answers")
        return data, info.get("ETag")

    def replace(self, local: Path, rel: str, version: str | None) -> bool:
        """local's bytes as rel, only where rel is still what was read as `version` (None: where there was none):
        False where another writer came first. A conditional write on S3; elsewhere a plain atomic upload (a
        writer between the read and this write goes unseen)."""
        if not _conditional(self.fs):
            self.upload_file(local, rel)
            return True
        path = self._abs(rel)
        condition = {"IfMatch": version} if version else {"mode": "create"}
        with self._answering(f"uploading {rel}"), self._bucket_kept():
            try:
                self.fs.pipe_file(path, Path(local).read_bytes(), **condition)
            except FileNotFoundError:
                raise
            except OSError:   # a precondition that did not hold reads as EINVAL (If-Match) or FileExistsError
                self.fs.invalidate_cache(path)
                try:
                    now = self.fs.info(path).get("ETag")
                except FileNotFoundError:
                    now = None
                if now != version:
                    return False
                raise
        return True

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

    def has_marker(self, rel: str, marker: str) -> bool:
        with self._answering(f"looking up {rel}"):
            return self.fs.exists(self._abs(f"{rel}/{marker}"))

    def fetch(self, rel: str, local: Path, marker: str) -> bool:
        """The build rel/<marker> names, into local; False where there is no marker naming a build (nothing
        finished there)."""
        try:
            with self._answering(f"looking up {rel}"):
                named = self.fs.cat_file(self._abs(f"{rel}/{marker}"))
        except FileNotFoundError:
            return False
        try:
            build = named.decode().strip()
        except UnicodeDecodeError:
            raise UnusableEntry("its marker is not text") from None
        if not _BUILD.match(build):
            raise UnusableEntry(f"its marker names {build[:80]!r}, not a build")
        if not self.download_dir(f"{rel}/{build}", local) or not (Path(local) / marker).is_file():
            raise UnusableEntry(f"its marker names {build!r}, which holds no finished build")
        return True

    def download_run(self, local: Path) -> None:
        """A run into local: its results.json, then the folder of each variant that names; nothing else under
        the run's prefix is listed or downloaded (a prefix holding thousands of other keys costs nothing)."""
        data, _ = self.read_whole(RESULTS_FILE)
        if data is None:
            return
        target = local_target(self.url, Path(local), RESULTS_FILE)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        try:
            variants = json.loads(data).get("variants")
        except (ValueError, AttributeError):
            return   # the reader says what is wrong with it
        for name in variants if isinstance(variants, dict) else []:
            try:
                folder = f"variants/{checked_name(name, 'variant')}"
            except UnsafePath:
                continue   # the reader refuses it, named
            self.download_dir(folder, Path(local) / folder)

    def download_dir(self, rel: str, local: Path) -> int:
        """Every finished file under rel into local (created as needed); the number of files."""
        with self._answering(f"downloading {rel or 'the run'}"):
            return self._download_dir(rel, local)

    def _download_dir(self, rel: str, local: Path) -> int:
        """Every key is checked before the first byte is downloaded: one the suite would never write (an empty
        part, `..`) refuses the folder, and nothing of it lands in the mirror."""
        base = self._abs(rel)
        self.fs.invalidate_cache(base)
        wanted = []
        for remote_path, info in sorted(self.fs.find(base, detail=True).items()):
            if remote_path == base:
                continue   # rel names a file, not a folder
            if not remote_path.startswith(f"{base}/"):
                raise RemoteError(f"{self.url}: it lists {remote_path!r}, outside {rel or 'its root'}")
            relative = remote_path[len(base) + 1:]   # exactly: 'a//b' is not 'a/b'
            name = relative.rsplit("/", 1)[-1]
            if _TEMPORARY.match(name) or relative.startswith(BUILD_PREFIX) or self._through_link(remote_path):
                continue
            wanted.append((remote_path, local_target(self.url, Path(local), relative), info.get("size")))
        for remote_path, target, size in wanted:
            target.parent.mkdir(parents=True, exist_ok=True)
            self.fs.get_file(remote_path, str(target))
            got = target.stat().st_size
            if isinstance(size, int) and got != size:
                target.unlink(missing_ok=True)
                raise RemoteError(f"{self.url}: {remote_path[len(self.root) + 1:]} came back with {got} of its "
                                  f"{size} bytes: re-run once it answers")
        return len(wanted)

    def _through_link(self, remote_path: str) -> bool:
        """Whether a listed file is, or lies under, a symbolic link below the root (a file:// run can hold one
        to a file of the user's that must never be copied into a run): such a file is not downloaded. Object
        stores have no links."""
        if not getattr(self.fs, "local_file", False):
            return False
        parts = remote_path[len(self.root):].strip("/").split("/")
        return any(os.path.islink(f"{self.root}/{'/'.join(parts[:n])}") for n in range(1, len(parts) + 1))


def _conditional(fs) -> bool:
    """Whether the filesystem writes on a condition (S3's If-Match / If-None-Match)."""
    protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    return any(p in ("s3", "s3a") for p in protocols)


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


def locate(where: str | Path, kind: str, probe: bool = True) -> Location:
    """kind ('runs', 'cache') keeps a run's mirror apart from a cache's of the same URL; probe: one request
    first, so that a bucket that cannot be used is one error before any work."""
    if not is_url(str(where)):
        return Location(Path(where))
    if str(where).startswith("file://") and not str(where).startswith("file:///"):
        raise RemoteError(f"{where}: a file URL needs an absolute path (file:///...)")
    remote = Remote(str(where))
    if probe:
        remote.probe()
    return Location(mirror_root() / kind / digest(remote.url)[:16], remote)


def pull_run(where: str) -> Location:
    """A run directory at a URL, brought into this node's mirror: its results and its variants' files."""
    location = locate(where, "runs")
    location.remote.download_run(location.local)
    return location
