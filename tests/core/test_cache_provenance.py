"""The stage cache cannot be poisoned silently: every entry's `done` marker records who wrote it (the run's trust
level, the suite's version and source digest) and a digest of its files; a forged marker, an entry written by a
less trusted run, and a checkpoint changed after it was sealed are rebuilt, not served. A pull request's run
reads the trusted cache (QUANT_CACHE_READ_FROM) and writes only its own."""

from __future__ import annotations

import json
import os
import pickle
import time

import pytest

from core.provenance import TrustError, current_trust
from core.remote import Remote
from core.store import Cache

WEIGHTS = bytes(range(256)) * 64


def build_checkpoint(cache: Cache, key: str = "k") -> None:
    build = cache.staging("checkpoints", key)
    (build / "model").mkdir()
    (build / "model" / "weights.safetensors").write_bytes(WEIGHTS)
    (build / "model" / "config.json").write_text('{"bits": 4}')
    cache.commit("checkpoints", key, build)


def snapshot(root) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
            and ".locks" not in p.parts}


def test_an_entry_records_its_writer_and_the_digest_of_its_files(tmp_path):
    cache = Cache(tmp_path)
    cache.save_json("evals", "k", {"accuracy": 0.5})
    record = json.loads((tmp_path / "evals" / "k" / "done").read_text())
    assert record["trust"] == "trusted" and record["suite"] and len(record["source"]) == len(record["digest"]) == 20
    assert Cache(tmp_path).has("evals", "k") and Cache(tmp_path).load_json("evals", "k") == {"accuracy": 0.5}


@pytest.mark.parametrize("marker", ["", '{"trust": "trusted"}', "not json"])
def test_a_planted_done_marker_is_rebuilt_not_served(tmp_path, capsys, marker):
    forged = tmp_path / "evals" / "k"
    forged.mkdir(parents=True)
    (forged / "result.json").write_text('{"accuracy": 0.99}')
    (forged / "done").write_text(marker)
    cache = Cache(tmp_path)
    assert not cache.has("evals", "k")
    assert "not reusing" in capsys.readouterr().err
    with cache.building("evals", "k") as needed:
        assert needed
        cache.save_json("evals", "k", {"accuracy": 0.5})
    assert cache.has("evals", "k") and cache.load_json("evals", "k") == {"accuracy": 0.5}


def test_a_marker_claiming_a_trusted_writer_over_other_files_is_rebuilt(tmp_path):
    cache = Cache(tmp_path)
    cache.save_json("evals", "k", {"accuracy": 0.5})
    (tmp_path / "evals" / "k" / "result.json").write_text('{"accuracy": 0.99}')   # the record kept, the data not
    assert not Cache(tmp_path).has("evals", "k")


def test_a_checkpoint_changed_after_it_was_sealed_is_rebuilt_even_with_its_times_put_back(tmp_path):
    cache = Cache(tmp_path)
    build_checkpoint(cache)
    weights = tmp_path / "checkpoints" / "k" / "model" / "weights.safetensors"
    before = weights.stat()
    time.sleep(0.05)   # later than the file system's clock tick (its times' granularity)
    weights.write_bytes(b"\xff" + WEIGHTS[1:])   # same size
    os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert not cache.has("checkpoints", "k") and not Cache(tmp_path).has("checkpoints", "k")
    build_checkpoint(cache)
    assert cache.has("checkpoints", "k") and weights.read_bytes() == WEIGHTS


def test_weights_reached_through_a_linked_folder_are_sealed_and_checked(tmp_path):
    """A checkpoint whose folder links to weights elsewhere: the digest covers every file the entry reaches, so
    a change to the linked weights (or to where the link points) rebuilds it."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "weights.safetensors").write_bytes(WEIGHTS)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "weights.safetensors").write_bytes(b"\xfe" + WEIGHTS[1:])
    cache = Cache(tmp_path / "cache")

    def build() -> None:
        staged = cache.staging("checkpoints", "k")
        (staged / "model").symlink_to(elsewhere)
        (staged / "loop").symlink_to(staged)   # walked once, not forever
        cache.commit("checkpoints", "k", staged)

    build()
    assert cache.has("checkpoints", "k")
    (elsewhere / "weights.safetensors").write_bytes(b"\xff" + WEIGHTS[1:])
    assert not cache.has("checkpoints", "k") and not Cache(tmp_path / "cache").has("checkpoints", "k")
    (elsewhere / "weights.safetensors").write_bytes(WEIGHTS)
    build()
    entry = tmp_path / "cache" / "checkpoints" / "k"
    (entry / "model").unlink()
    (entry / "model").symlink_to(tmp_path / "other")
    assert not Cache(tmp_path / "cache").has("checkpoints", "k")


def test_a_copied_cache_is_checked_by_content_and_reused(tmp_path):
    import shutil

    build_checkpoint(Cache(tmp_path / "a"))
    shutil.copytree(tmp_path / "a", tmp_path / "b")   # new inodes and times: the files are hashed, and match
    assert Cache(tmp_path / "b").has("checkpoints", "k")


def test_a_trusted_run_never_reuses_what_a_pull_requests_run_wrote(tmp_path, monkeypatch):
    pull = Cache(tmp_path, trust="pull-request")
    pull.save_json("evals", "k", {"accuracy": 0.99})
    assert pull.has("evals", "k") and json.loads((tmp_path / "evals" / "k" / "done").read_text())["trust"] == \
        "pull-request"
    trusted = Cache(tmp_path)
    assert not trusted.has("evals", "k")
    trusted.save_json("evals", "k", {"accuracy": 0.5})
    assert trusted.has("evals", "k") and pull.has("evals", "k")   # a pull request may reuse a trusted entry
    monkeypatch.setenv("QUANT_CACHE_TRUST", "pull-request")
    assert Cache(tmp_path).trust == "pull-request"


def test_an_unknown_trust_level_is_one_clear_error(monkeypatch):
    monkeypatch.setenv("QUANT_CACHE_TRUST", "root")
    with pytest.raises(TrustError, match="QUANT_CACHE_TRUST='root' is not a trust level; use one of"):
        current_trust()


def test_a_pull_requests_run_reads_the_trusted_cache_and_writes_only_its_own(tmp_path, monkeypatch):
    trusted = Cache(tmp_path / "trusted")
    build_checkpoint(trusted, "base")
    trusted.save_json("evals", "base-eval", {"accuracy": 0.5})
    before = snapshot(tmp_path / "trusted")
    monkeypatch.setenv("QUANT_CACHE_TRUST", "pull-request")
    monkeypatch.setenv("QUANT_CACHE_READ_FROM", str(tmp_path / "trusted"))
    job = Cache.at(tmp_path / "job")
    assert job.has("checkpoints", "base") and job.path("checkpoints", "base") == tmp_path / "trusted" / "checkpoints" / "base"
    assert job.load_json("evals", "base-eval") == {"accuracy": 0.5}
    with job.building("evals", "candidate") as needed:
        assert needed
        job.save_json("evals", "candidate", {"accuracy": 0.4})
    assert job.path("evals", "candidate") == tmp_path / "job" / "evals" / "candidate"
    assert snapshot(tmp_path / "trusted") == before
    shipped = pickle.loads(pickle.dumps(job))   # a worker process sees the same two caches at the same trust
    assert (shipped.trust, shipped.read_from) == ("pull-request", tmp_path / "trusted")
    assert shipped.has("evals", "candidate") and shipped.has("checkpoints", "base")


def test_a_tampered_entry_in_the_read_only_cache_is_not_served(tmp_path):
    trusted = Cache(tmp_path / "trusted")
    trusted.save_json("evals", "k", {"accuracy": 0.5})
    (tmp_path / "trusted" / "evals" / "k" / "result.json").write_text('{"accuracy": 0.99}')
    job = Cache(tmp_path / "job", trust="pull-request", read_from=tmp_path / "trusted")
    assert not job.has("evals", "k") and job.path("evals", "k") == tmp_path / "job" / "evals" / "k"


def test_the_record_travels_with_an_entry_through_a_remote_cache(tmp_path):
    url = (tmp_path / "bucket").as_uri()
    Cache(tmp_path / "pr-node", Remote(url), trust="pull-request").save_json("evals", "k", {"accuracy": 0.99})
    assert Cache(tmp_path / "other-pr-node", Remote(url), trust="pull-request").has("evals", "k")
    assert not Cache(tmp_path / "release-node", Remote(url)).has("evals", "k")
