"""The stage cache at an fsspec URL (file:/// here; s3:// and gs:// go through the same fsspec calls): a stage
one node finishes is uploaded once, `done` last, and another node with its own mirror finds it, downloads it
and reads the same bytes; a stage whose upload was cut off is not taken for finished."""

from __future__ import annotations

import pickle

import pytest

from core.remote import Remote, RemoteError, is_url, locate
from core.store import Cache


def node(tmp_path, name: str, url: str) -> Cache:
    """A node's view of the shared cache: its own local mirror, the same URL."""
    return Cache(tmp_path / name, Remote(url))


def build_stage(cache: Cache, stage: str, key: str) -> None:
    build = cache.staging(stage, key)
    (build / "model").mkdir()
    (build / "model" / "weights.bin").write_bytes(bytes(range(256)) * 64)
    (build / "config.json").write_text('{"bits": 4}')
    cache.commit(stage, key, build)


def test_a_stage_finished_on_one_node_is_found_and_read_on_another(tmp_path):
    url = (tmp_path / "bucket").as_uri()
    quantizer, server = node(tmp_path, "node-a", url), node(tmp_path, "node-b", url)
    assert not server.has("checkpoints", "k1")

    build_stage(quantizer, "checkpoints", "k1")
    quantizer.save_json("evals", "k2", {"value": 0.5}, extra={"samples.jsonl": [{"doc_id": 0}]})

    assert server.has("checkpoints", "k1") and server.has("evals", "k2")
    got = server.path("checkpoints", "k1")
    assert str(got).startswith(str(tmp_path / "node-b"))
    assert (got / "model" / "weights.bin").read_bytes() == bytes(range(256)) * 64
    assert (got / "config.json").read_text() == '{"bits": 4}'
    assert server.load_json("evals", "k2") == {"value": 0.5}
    assert (server.path("evals", "k2") / "samples.jsonl").read_text() == '{"doc_id": 0}\n'
    remote_names = {p.name for p in (tmp_path / "bucket").rglob("*")}
    assert not any(name.endswith(".tmp") for name in remote_names)   # every upload moved into place


def test_done_is_uploaded_after_everything_else(tmp_path, monkeypatch):
    url = (tmp_path / "bucket").as_uri()
    order: list[str] = []
    upload = Remote.upload_file
    monkeypatch.setattr(Remote, "upload_file", lambda self, local, rel: (order.append(rel), upload(self, local, rel)))
    build_stage(node(tmp_path, "a", url), "checkpoints", "k")
    assert order[-1] == "checkpoints/k/done" and set(order[:-1]) == {
        "checkpoints/k/config.json", "checkpoints/k/model/weights.bin"}


def test_an_upload_cut_off_before_done_is_not_a_finished_stage(tmp_path, monkeypatch):
    url = (tmp_path / "bucket").as_uri()
    upload = Remote.upload_file

    def dies_at_done(self, local, rel):
        if rel.endswith("/done"):
            raise KeyboardInterrupt   # the node is killed between the data and the marker
        upload(self, local, rel)

    monkeypatch.setattr(Remote, "upload_file", dies_at_done)
    with pytest.raises(KeyboardInterrupt):
        build_stage(node(tmp_path, "a", url), "checkpoints", "k")
    monkeypatch.setattr(Remote, "upload_file", upload)
    assert (tmp_path / "bucket" / "checkpoints" / "k" / "config.json").exists()
    other = node(tmp_path, "b", url)
    assert not other.has("checkpoints", "k")
    build_stage(other, "checkpoints", "k")   # redone, and now complete for everyone
    assert node(tmp_path, "c", url).has("checkpoints", "k")


def test_locations(tmp_path, monkeypatch):
    monkeypatch.setenv("QUANT_MIRROR_DIR", str(tmp_path / "mirrors"))
    assert locate(tmp_path / "runs", "runs").remote is None
    assert not is_url("runs/x") and is_url("s3://bucket/runs") and is_url("file:///tmp/x")
    run, cache = locate((tmp_path / "b").as_uri(), "runs"), locate((tmp_path / "b").as_uri(), "cache")
    assert run.local != cache.local and run.local.is_relative_to(tmp_path / "mirrors")
    assert str(run) == (tmp_path / "b").as_uri()
    with pytest.raises(RemoteError, match="absolute path"):
        locate("file://runs/x", "runs")
    with pytest.raises(RemoteError, match="fsspec cannot open"):
        locate("nosuchprotocol://bucket/x", "runs")


def test_a_cache_at_a_url_travels_to_workers(tmp_path):
    """Ray pickles the sweep's context (and its cache) to ship it to a worker."""
    cache = Cache.at((tmp_path / "bucket").as_uri())
    shipped = pickle.loads(pickle.dumps(cache))
    assert shipped.remote.url == cache.remote.url and shipped.root == cache.root
    build_stage(cache, "s", "k")
    assert Cache(tmp_path / "elsewhere", shipped.remote).has("s", "k")
