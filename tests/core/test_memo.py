"""core/memo.py: an answer computed once per key, kept across processes (a file per answer); and copy_file
leaving an identical destination alone."""

from __future__ import annotations

import os

from core.memo import remembered, source_digest
from core.store import copy_file


def test_an_answer_is_computed_once_per_key(tmp_path, monkeypatch):
    monkeypatch.setenv("QUANT_CHECK_CACHE", str(tmp_path / "checks"))
    calls = []

    def compute(value):
        calls.append(value)
        return [("variants", 0), value]

    assert remembered("kind", {"a": 1}, lambda: compute("x")) == [["variants", 0], "x"]
    assert remembered("kind", {"a": 1}, lambda: compute("y")) == [["variants", 0], "x"]   # remembered
    assert remembered("kind", {"a": 2}, lambda: compute("z")) == [["variants", 0], "z"]   # another key
    assert remembered("other", {"a": 1}, lambda: compute("w")) == [["variants", 0], "w"]  # another kind
    assert calls == ["x", "z", "w"]
    assert len(list((tmp_path / "checks").rglob("*.json"))) == 3


def test_a_damaged_or_unwritable_memo_costs_only_time(tmp_path, monkeypatch):
    root = tmp_path / "checks"
    monkeypatch.setenv("QUANT_CHECK_CACHE", str(root))
    remembered("kind", 1, lambda: "first")
    (stored,) = root.rglob("*.json")
    stored.write_text("{not json")
    assert remembered("kind", 1, lambda: "again") == "again"
    monkeypatch.setenv("QUANT_CHECK_CACHE", "/proc/no-such-place")
    assert remembered("kind", 1, lambda: "unwritable") == "unwritable"


def test_the_source_digest_follows_the_code(tmp_path):
    code = tmp_path / "check.py"
    code.write_text("A = 1\n")
    before = source_digest(code)
    code.write_text("A = 2\n")
    assert source_digest(code) != before


def test_copy_file_leaves_an_identical_destination_alone(tmp_path):
    src, dst = tmp_path / "src.jsonl", tmp_path / "out" / "dst.jsonl"
    src.write_text("one\n")
    copy_file(src, dst)
    os.utime(dst, ns=(0, 0))
    copy_file(src, dst)
    assert dst.stat().st_mtime_ns == 0   # not rewritten
    src.write_text("two\n")
    copy_file(src, dst)
    assert dst.read_text() == "two\n" and dst.stat().st_mtime_ns > 0
