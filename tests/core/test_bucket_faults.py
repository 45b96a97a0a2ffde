"""Runs and stage caches in an S3 bucket that misbehaves: moto's S3 server on 127.0.0.1 behind a relay that
changes answers (tests/multinode.py). Nothing broken is trusted, nothing finished is lost, a fault that clears
heals on the next run, and no bucket is ever created."""

from __future__ import annotations

import json
import pickle

import pytest

from core.remote import Remote, RemoteError, pull_run
from core.store import Cache
from tests.multinode import S3Server, cut_short, s3_behind_relay, through_relay

BUCKET = S3Server.BUCKET


s3 = pytest.fixture(scope="module", name="s3")(s3_behind_relay)


@pytest.fixture(autouse=True)
def relayed(s3, monkeypatch, tmp_path):
    through_relay(monkeypatch, *s3, tmp_path / "mirrors")


def put(server: S3Server, key: str, body: bytes | str) -> None:
    server.client.put_object(Bucket=BUCKET, Key=key, Body=body.encode() if isinstance(body, str) else body)


def get(server: S3Server, key: str) -> bytes:
    return server.client.get_object(Bucket=BUCKET, Key=key)["Body"].read()


RUN = {"recipe_name": "r", "variants": {"bf16": {"status": "ok"}}}


# --- a run at a URL --------------------------------------------------------------------------------------------

def test_a_results_json_cut_short_is_an_error_never_a_file(s3):
    server, relay = s3
    put(server, "cut/run/results.json", json.dumps(RUN) * 20)
    relay.fail("GET", "cut/run/results.json", cut_short)
    with pytest.raises(RemoteError, match=r"results.json came back with \d+ of its \d+ bytes"):
        pull_run(f"s3://{BUCKET}/cut/run")
    assert pull_run(f"s3://{BUCKET}/cut/run").local.joinpath("results.json").read_text() == json.dumps(RUN) * 20


def test_a_run_is_mirrored_only_as_far_as_its_results_name_it(s3):
    """Keys under the run's prefix that its results.json does not name are never listed or read, however many."""
    server, relay = s3
    put(server, "junk/run/results.json", json.dumps(RUN))
    put(server, "junk/run/variants/bf16/accuracy.jsonl", "{}\n")
    for i in range(60):
        put(server, f"junk/run/junk/{i:04d}", "x")
        put(server, f"junk/run/variants/gone-{i}/evals/x.jsonl", "x")
    local = pull_run(f"s3://{BUCKET}/junk/run").local
    assert sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file()) == [
        "results.json", "variants/bf16/accuracy.jsonl"]
    assert not [key for _, key in relay.seen if "junk/run/junk" in key or "gone-" in key]
    assert len(relay.seen) < 10


def test_a_key_with_an_empty_part_is_not_read_as_the_runs_own(s3):
    """`<run>//variants/...` is not `<run>/variants/...`: a stray key never stands in for the run's file."""
    server, _ = s3
    put(server, "stray/run/results.json", json.dumps(RUN))
    put(server, "stray/run//variants/bf16/accuracy.jsonl", "stray\n")
    put(server, "stray/run//results.json", json.dumps({**RUN, "recipe_name": "stray"}))
    local = pull_run(f"s3://{BUCKET}/stray/run").local
    assert json.loads(local.joinpath("results.json").read_text()) == RUN
    assert not local.joinpath("variants", "bf16", "accuracy.jsonl").exists()


def test_a_hostile_key_refuses_its_folder_before_anything_is_downloaded(s3, tmp_path):
    server, relay = s3
    put(server, "hostile/run/variants/bf16/a.jsonl", "a\n")
    put(server, "hostile/run/variants/bf16//b.jsonl", "b\n")
    with pytest.raises(RemoteError, match="leads outside"):
        Remote(f"s3://{BUCKET}/hostile/run").download_dir("variants/bf16", tmp_path / "got")
    assert not [p for p in (tmp_path / "got").rglob("*") if p.is_file()]
    assert not [key for method, key in relay.seen if method == "GET" and key.endswith(".jsonl")]


def test_a_bucket_deleted_mid_sweep_is_one_line_and_never_created_again(s3, tmp_path):
    server, _ = s3
    server.client.create_bucket(Bucket="short-lived")
    remote = Remote("s3://short-lived/runs/x")
    remote.probe()
    server.client.delete_bucket(Bucket="short-lived")
    (tmp_path / "results.json").write_text("{}")
    with pytest.raises(RemoteError, match="the bucket 'short-lived' does not exist") as raised:
        remote.upload_file(tmp_path / "results.json", "results.json")
    assert "\n" not in str(raised.value)
    assert "short-lived" not in [b["Name"] for b in server.client.list_buckets()["Buckets"]]


# --- a stage cache at a URL ------------------------------------------------------------------------------------

def node(tmp_path, name: str, prefix: str) -> Cache:
    return Cache(tmp_path / name, Remote(f"s3://{BUCKET}/{prefix}"))


def build(cache: Cache, stage: str, key: str, value: float) -> None:
    cache.save_json(stage, key, {"value": value}, extra={"samples.jsonl": [{"doc_id": 0, "score": value}]})


def test_a_marker_naming_another_entrys_whole_build_is_not_trusted(s3, tmp_path):
    """k2's marker names a copy of k1's build, its record and digest included: the record names k1, not k2."""
    server, _ = s3
    build(node(tmp_path, "a", "copied"), "evals", "k1", 1.0)
    named = get(server, "copied/evals/k1/done").decode()
    for key in [k["Key"] for k in server.client.list_objects_v2(Bucket=BUCKET, Prefix=f"copied/evals/k1/{named}/")["Contents"]]:
        put(server, key.replace("/k1/", "/k2/"), get(server, key))
    put(server, "copied/evals/k2/done", named)
    fresh = node(tmp_path, "fresh", "copied")
    assert fresh.has("evals", "k1") and not fresh.has("evals", "k2")


@pytest.mark.parametrize("marker", [b".build-gone", b".build-../../../x", b"\xff\xfe.build-\x80"],
                         ids=["missing-build", "outside", "not-utf8"])
def test_a_marker_that_cannot_be_used_is_nothing_finished_and_heals(s3, tmp_path, capsys, marker):
    server, _ = s3
    prefix = f"unusable-{marker.hex()[:12]}"
    put(server, f"{prefix}/evals/k/done", marker)
    cache = node(tmp_path, "a", prefix)
    assert not cache.has("evals", "k")
    notes = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(notes) == 1 and "rebuilding it" in notes[0] and f"s3://{BUCKET}/{prefix}/evals/k" in notes[0], notes
    build(cache, "evals", "k", 0.5)   # rebuilt: its marker replaced
    other = node(tmp_path, "b", prefix)
    assert other.has("evals", "k") and other.load_json("evals", "k") == {"value": 0.5}


def test_an_entry_sealed_here_but_never_published_is_published_before_it_is_reused(s3, tmp_path, monkeypatch):
    """The node is killed between sealing the entry in its mirror and publishing it; the retry on that node
    reuses the entry, and publishes it first, so other nodes find it instead of building it again."""
    server, _ = s3
    worker = node(tmp_path, "a", "unpublished")

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patched, pytest.raises(KeyboardInterrupt):
        patched.setattr(Remote, "publish", killed)
        build(worker, "checkpoints", "k", 0.25)
    assert not server.client.list_objects_v2(Bucket=BUCKET, Prefix="unpublished/").get("Contents")
    retry = node(tmp_path, "a", "unpublished")   # the retried task: a new process, the same mirror
    assert retry.has("checkpoints", "k")
    other = node(tmp_path, "b", "unpublished")
    assert other.has("checkpoints", "k") and other.load_json("checkpoints", "k") == {"value": 0.25}


def test_a_cache_shipped_to_a_node_that_cannot_reach_the_bucket_says_so_when_used(s3, tmp_path, monkeypatch):
    """Unpacking the cache on a worker sends no request (Ray unpacks arguments before the task runs, where an
    error is no variant's reason); the first lookup fails with one line naming the bucket."""
    cache = Cache.at(f"s3://{BUCKET}/shipped")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")   # that node's view: nothing answers
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    shipped = pickle.loads(pickle.dumps(cache))
    with pytest.raises(RemoteError, match=f"s3://{BUCKET}/shipped: ") as raised:
        shipped.has("evals", "k")
    assert "\n" not in str(raised.value)
