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
import tempfile
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Iterator

from core.owners import is_leftover, owner_tag

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
    """cache_root/<stage>/<key>/ holds one finished stage output; `done` marks it complete.

    With a remote (core.remote: a cache at an fsspec URL), root is this node's mirror of it: a stage another
    node finished is downloaded on first `has`, and a stage finished here is uploaded, `done` last."""

    def __init__(self, root: Path, remote=None) -> None:
        self.root = Path(root)
        self.remote = remote

    @classmethod
    def at(cls, where: str | Path) -> Cache:
        """A local directory, or an fsspec URL (s3://, gs://, file:///...) mirrored on this node."""
        from core.remote import locate

        location = locate(where, "cache")
        return cls(location.local, location.remote)

    def __str__(self) -> str:
        return self.remote.url if self.remote else str(self.root)

    def __reduce__(self):
        """Shipped to another process (a Ray worker, maybe on another node), a cache at a URL mirrors it where
        it lands: the sender's mirror path means nothing there."""
        return (Cache.at, (self.remote.url,)) if self.remote else (Cache, (self.root,))

    def path(self, stage: str, key: str) -> Path:
        return self.root / stage / key

    def has(self, stage: str, key: str) -> bool:
        if (self.path(stage, key) / "done").exists():
            return True
        return self.remote is not None and self._download(stage, key)

    def _download(self, stage: str, key: str) -> bool:
        build = self.staging(stage, key)
        try:
            if not self.remote.fetch(f"{stage}/{key}", build, marker="done"):
                shutil.rmtree(build, ignore_errors=True)
                return False
            self._commit_here(stage, key, build)
        except BaseException:
            shutil.rmtree(build, ignore_errors=True)
            raise
        return True

    def commit(self, stage: str, key: str, build_dir: Path) -> Path:
        """Move a fully built directory into place; the `done` marker is written last, after the data is
        on disk (a directory without it, left by a kill, is redone and replaced). With a remote, uploaded."""
        final = self._commit_here(stage, key, build_dir)
        if self.remote is not None:
            self.remote.publish(final, f"{stage}/{key}", marker="done")
        return final

    def _commit_here(self, stage: str, key: str, build_dir: Path) -> Path:
        final = self.path(stage, key)
        final.parent.mkdir(parents=True, exist_ok=True)
        for path in sorted(Path(build_dir).rglob("*")):
            if path.is_file() and not path.is_symlink():
                _fsync(path)
        if final.exists():
            shutil.rmtree(final)
        os.replace(build_dir, final)
        _fsync(final.parent, directory=True)
        write_text(final / "done", "")
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
