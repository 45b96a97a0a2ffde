"""The run directory and the content-addressed stage cache. Every write is atomic."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2, default=str)
        f.write("\n")
    os.replace(tmp, path)


def write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def write_jsonl(path: Path, rows: list[dict]) -> None:
    write_text(path, "".join(json.dumps(r, default=str) + "\n" for r in rows))


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())


class Cache:
    """cache_root/<stage>/<key>/ holds one finished stage output; `done` marks it complete."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, stage: str, key: str) -> Path:
        return self.root / stage / key

    def has(self, stage: str, key: str) -> bool:
        return (self.path(stage, key) / "done").exists()

    def commit(self, stage: str, key: str, build_dir: Path) -> Path:
        """Move a fully built directory into place; the `done` marker is written last."""
        final = self.path(stage, key)
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.exists():
            shutil.rmtree(final)
        os.replace(build_dir, final)
        (final / "done").write_text("")
        return final

    def staging(self, stage: str, key: str) -> Path:
        base = self.root / stage
        base.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(dir=base, prefix=f".{key}."))

    def save_json(self, stage: str, key: str, data: Any, extra: dict[str, list[dict]] | None = None) -> Path:
        build = self.staging(stage, key)
        write_json(build / "result.json", data)
        for name, rows in (extra or {}).items():
            write_jsonl(build / name, rows)
        return self.commit(stage, key, build)

    def load_json(self, stage: str, key: str) -> Any:
        return read_json(self.path(stage, key) / "result.json")
