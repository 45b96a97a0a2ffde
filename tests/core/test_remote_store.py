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
    build = (tmp_path / "bucket" / "checkpoints" / "k" / "done").read_text()
    assert build.startswith(".build-")   # the marker names the build its files went to
    assert order[-1] == "checkpoints/k/done" and set(order[:-1]) == {   # the build's own marker: who wrote it
        f"checkpoints/k/{build}/config.json", f"checkpoints/k/{build}/model/weights.bin", f"checkpoints/k/{build}/done"}


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
    assert list((tmp_path / "bucket" / "checkpoints" / "k").glob(".build-*/config.json"))
    other = node(tmp_path, "b", url)
    assert not other.has("checkpoints", "k")
    build_stage(other, "checkpoints", "k")   # redone, and now complete for everyone
    assert node(tmp_path, "c", url).has("checkpoints", "k")


def test_two_nodes_publishing_one_stage_at_once_never_leave_a_mix(tmp_path, monkeypatch):
    """Each node's files go to its own build; the marker written last names one whole build. Here the two
    uploads interleave file by file (a's config, b's config, b's weights, b's marker, a's weights, a's marker)."""
    url = (tmp_path / "bucket").as_uri()
    a, b = node(tmp_path, "a", url), node(tmp_path, "b", url)
    builds = {}
    for cache, bits in ((a, "4"), (b, "8")):
        build = cache.staging("perf", "k")
        (build / "result.json").write_text(f'{{"bits": {bits}}}')
        (build / "records.jsonl").write_text(f"{bits}\n" * 3)
        builds[cache] = cache._commit_here("perf", "k", build)
    a_files = sorted(p for p in builds[a].iterdir() if p.name != "done")
    ra, rb = a.remote, b.remote
    ra.upload_file(a_files[0], f"perf/k/.build-host-1-a/{a_files[0].name}")
    monkeypatch.setattr("core.remote.owner_tag", lambda: "host-2-b")   # two processes: two owner tags
    rb.publish(builds[b], "perf/k", marker="done")
    monkeypatch.setattr("core.remote.owner_tag", lambda: "host-1-a")
    ra.publish(builds[a], "perf/k", marker="done")   # a finishes last: its build is the one named
    reader = node(tmp_path, "c", url)
    assert reader.has("perf", "k")
    got = {p.name: p.read_text() for p in reader.path("perf", "k").iterdir() if p.name != "done"}
    assert got == {"result.json": '{"bits": 4}', "records.jsonl": "4\n" * 3}


def test_an_entry_published_without_a_build_is_not_reused(tmp_path):
    """A marker with nothing in it and the entry's files beside it: no build, so no record of who wrote it."""
    bucket = tmp_path / "bucket" / "evals" / "k"
    bucket.mkdir(parents=True)
    (bucket / "result.json").write_text('{"value": 1}')
    (bucket / "done").write_text("")
    reader = node(tmp_path, "c", (tmp_path / "bucket").as_uri())
    assert not reader.has("evals", "k")


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
