"""The run directory and the content-addressed stage cache.

Every write is atomic: data goes to a temporary name beside its target, is fsynced and moved into place
(os.replace), so a kill at any instant leaves the old file or the new one. Temporary names carry their
owner (host, pid and start time); one whose owner is gone from this host is a leftover of a killed run,
removed by `remove_leftovers` and `Cache.remove_leftovers`, never taken for a finished file or stage.
"""

from __future__ import annotations

import fcntl
import filecmp
import json
import os
import shutil
import sys
import tempfile
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Iterator

from core.owners import is_leftover, owner_tag
from core.provenance import MARKER, current_trust, refusal, seal
from core.remote import UnusableEntry

def _fsync(path: str | Path, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path beside `path` to write to; fsynced and moved onto `path` when the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{owner_tag()}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        _fsync(tmp)
        os.replace(tmp, path)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync(path.parent, directory=True)


def write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: Path, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2, default=str) + "\n")


def write_jsonl(path: Path, rows: list[dict]) -> None:
    write_text(path, "".join(json.dumps(r, default=str) + "\n" for r in rows))


def copy_file(src: Path, dst: Path) -> None:
    """A destination already identical to src is left alone (a cached stage re-collected rewrites nothing)."""
    if Path(dst).is_file() and filecmp.cmp(src, dst, shallow=False):
        return
    with atomic_path(dst) as tmp:
        shutil.copyfile(src, tmp)


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())


def remove_leftovers(directory: Path, recursive: bool = False) -> list[Path]:
    """Remove the temporary files and staging directories of killed runs in directory."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return removed
    for entry in entries:
        path = Path(entry.path)
        if is_leftover(entry.name):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with suppress(FileNotFoundError):
                    path.unlink()
            removed.append(path)
        elif recursive and entry.is_dir(follow_symlinks=False):
            removed += remove_leftovers(path, recursive=True)
    return removed


class Cache:
    """cache_root/<stage>/<key>/ holds one finished stage output; `done` marks it complete and records who wrote
    it and a digest of its files (core.provenance): an entry this run's trust level must not reuse is rebuilt.

    With a remote (core.remote: a cache at an fsspec URL), root is this node's mirror of it: a stage another
    node finished is downloaded on first `has`, and a stage finished here is uploaded, `done` last.
    read_from: a further cache whose finished stages are reused but never written (a CI job's view of the
    trusted cache, from QUANT_CACHE_READ_FROM)."""

    def __init__(self, root: Path, remote=None, trust: str | None = None, read_from: Path | None = None) -> None:
        self.root = Path(root)
        self.remote = remote
        self.trust = trust or current_trust()
        self.read_from = Path(read_from) if read_from else None
        self._refused: set[Path] = set()

    @classmethod
    def at(cls, where: str | Path) -> Cache:
        """A local directory, or an fsspec URL (s3://, gs://, file:///...) mirrored on this node."""
        from core.remote import locate

        location = locate(where, "cache")
        return cls(location.local, location.remote, read_from=os.environ.get("QUANT_CACHE_READ_FROM") or None)

    def __str__(self) -> str:
        return self.remote.url if self.remote else str(self.root)

    def __reduce__(self):
        """Shipped to another process (a Ray worker, maybe on another node), a cache at a URL mirrors it where
        it lands: the sender's mirror path means nothing there. Unpacking it sends no request: a node that cannot
        reach the bucket says so when the cache is first used, as the variant's reason."""
        if self.remote:
            return (_landed, (self.remote.url,))
        return (Cache, (self.root, None, self.trust, self.read_from))

    def path(self, stage: str, key: str) -> Path:
        """Where the entry is read from: this cache's own, or read_from's where only that one is reusable."""
        own = self.root / stage / key
        if self.read_from is not None and not self._reusable(own) and self._reusable(self.read_from / stage / key):
            return self.read_from / stage / key
        return own

    def has(self, stage: str, key: str) -> bool:
        own = self.root / stage / key
        if self._reusable(own):
            if self.remote is not None:
                self._publish_once(stage, key, own)
            return True
        if self.read_from is not None and self._reusable(self.read_from / stage / key):
            return True
        return self.remote is not None and own not in self._refused and self._download(stage, key)

    def _reusable(self, entry: Path) -> bool:
        try:
            record = (entry / MARKER).read_text()
        except (FileNotFoundError, NotADirectoryError):
            return False
        reason = refusal(entry, record, self.trust)
        if reason and entry not in self._refused:
            self._refused.add(entry)
            print(f"stage cache: not reusing {entry}: {reason}; rebuilding it", file=sys.stderr)
        return reason is None

    def _published(self, stage: str, key: str) -> Path:
        """Beside the entries: that this mirror's entry is in the bucket too (a kill between sealing an entry here
        and publishing it leaves none)."""
        return self.root / ".published" / stage / key

    def _publish_once(self, stage: str, key: str, entry: Path) -> None:
        """An entry sealed here but never published (its node killed mid-upload) is published before it is
        reused, so that other nodes find it; one request per entry, once."""
        note = self._published(stage, key)
        if note.exists():
            return
        if not self.remote.has_marker(f"{stage}/{key}", MARKER):
            self.remote.publish(entry, f"{stage}/{key}", marker=MARKER)
        write_text(note, "")

    def _download(self, stage: str, key: str) -> bool:
        build = self.staging(stage, key)
        try:
            try:
                fetched = self.remote.fetch(f"{stage}/{key}", build, marker=MARKER)
            except UnusableEntry as exc:   # nothing finished there: rebuilt, and the marker replaced
                self._refused.add(self.root / stage / key)
                print(f"stage cache: not reusing {self.remote.url}/{stage}/{key}: {exc}; rebuilding it", file=sys.stderr)
                fetched = False
            if not fetched:
                shutil.rmtree(build, ignore_errors=True)
                return False
            # The record of who wrote it travels inside the build; an entry published without one is refused.
            marker = build / MARKER
            record = marker.read_text() if marker.is_file() else ""
            marker.unlink(missing_ok=True)
            final = self._commit_here(stage, key, build, record)
        except BaseException:
            shutil.rmtree(build, ignore_errors=True)
            raise
        write_text(self._published(stage, key), "")
        return self._reusable(final)

    def commit(self, stage: str, key: str, build_dir: Path) -> Path:
        """Move a fully built directory into place; the `done` marker is written last, after the data is
        on disk (a directory without it, left by a kill, is redone and replaced). With a remote, uploaded."""
        final = self._commit_here(stage, key, build_dir)
        if self.remote is not None:
            self.remote.publish(final, f"{stage}/{key}", marker=MARKER)
            write_text(self._published(stage, key), "")
        return final

    def _commit_here(self, stage: str, key: str, build_dir: Path, record: str | None = None) -> Path:
        """record: the `done` marker an entry came with from elsewhere; None seals it as this run's."""
        final = self.root / stage / key
        final.parent.mkdir(parents=True, exist_ok=True)
        for path in sorted(Path(build_dir).rglob("*")):
            if path.is_file() and not path.is_symlink():
                _fsync(path)
        if final.exists():
            shutil.rmtree(final)
        os.replace(build_dir, final)
        _fsync(final.parent, directory=True)
        self._refused.discard(final)
        self._published(stage, key).unlink(missing_ok=True)
        write_text(final / MARKER, seal(final, self.trust) if record is None else record)
        return final

    @contextmanager
    def building(self, stage: str, key: str, on_wait=None) -> Iterator[bool]:
        """Hold the lock of one cache key while its stage is built; yields whether the stage still needs
        building (another sweep on this cache may have finished it while this one waited). A kernel file lock:
        it goes with the process that holds it, however that ends; on_wait() is called if another holds it."""
        locks = self.root / ".locks"
        locks.mkdir(parents=True, exist_ok=True)
        fd = os.open(locks / f"{stage}-{key}.lock", os.O_RDWR | os.O_CREAT, 0o666)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if on_wait:
                    on_wait()
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield not self.has(stage, key)
        finally:
            os.close(fd)

    def staging(self, stage: str, key: str) -> Path:
        """A fresh directory to build a stage output in, removed by remove_leftovers once this process is gone."""
        base = self.root / stage
        base.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(dir=base, prefix=f".{key}.{owner_tag()}."))

    def remove_leftovers(self) -> list[Path]:
        """Staging directories (and temporary files) of killed runs, in every stage."""
        stages = [p for p in self.root.iterdir() if p.is_dir()] if self.root.is_dir() else []
        return [removed for stage in stages for removed in remove_leftovers(stage)]

    def save_json(self, stage: str, key: str, data: Any, extra: dict[str, list[dict]] | None = None,
                  files: dict[str, Path] | None = None) -> Path:
        """extra: JSON-lines files to store beside result.json; files: {name in the stage: file to copy}."""
        build = self.staging(stage, key)
        try:
            write_json(build / "result.json", data)
            for name, rows in (extra or {}).items():
                write_jsonl(build / name, rows)
            for name, src in (files or {}).items():
                copy_file(src, build / name)
            return self.commit(stage, key, build)
        except BaseException:
            shutil.rmtree(build, ignore_errors=True)
            raise

    def load_json(self, stage: str, key: str) -> Any:
        return read_json(self.path(stage, key) / "result.json")


def _landed(url: str) -> Cache:
    """A cache at url as a process that received it sees it: this node's own mirror, no request sent."""
    from core.remote import locate

    location = locate(url, "cache", probe=False)
    return Cache(location.local, location.remote, read_from=os.environ.get("QUANT_CACHE_READ_FROM") or None)



def model_cache_root() -> Path:
    """Where model files made here live: converted GGUF files, assembled chunked files."""
    return Path(os.environ.get("QUANT_MODEL_CACHE") or Path.home() / ".cache" / "quant-suite" / "models")
