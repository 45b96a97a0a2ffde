"""A run's results.json in an S3 bucket (moto on 127.0.0.1 behind a fault relay: tests/multinode.py) is only ever
replaced by a superset of what it held: two sweeps on one `--out` merge, a copy that cannot be read whole stops
the sweep instead of being overwritten."""

from __future__ import annotations

import json

import pytest

from core.recipe import parse_recipe
from core.remote import Remote, RemoteError
from quant.context import new_record
from quant.progress import Reporter
from quant.sweep import _load_previous, run_sweep
from tests.helpers import DEMO_MODEL
from tests.multinode import S3Server, cut_short, s3_behind_relay, through_relay

BUCKET = S3Server.BUCKET
RECIPE = """\
name: shared
model: demo
variants:
  - {name: bf16, baseline: true}
  - {name: theirs, checkpoint: CHECKPOINT}
  - {name: theirs-wrong3, checkpoint: CHECKPOINT}
tasks: [{name: demo_math, limit: 4}]
gates: {min_n: 4}
""".replace("CHECKPOINT", str(DEMO_MODEL))


s3 = pytest.fixture(scope="module", name="s3")(s3_behind_relay)


@pytest.fixture(autouse=True)
def relayed(s3, monkeypatch, tmp_path):
    through_relay(monkeypatch, *s3, tmp_path / "mirrors")


def held(server: S3Server, key: str) -> dict:
    return json.loads(server.client.get_object(Bucket=BUCKET, Key=key)["Body"].read())


class Sweep:
    """One sweep's view of a run at a URL: its own mirror, its results as the sweep started them."""

    def __init__(self, tmp_path, url: str, name: str) -> None:
        self.recipe = parse_recipe(RECIPE)
        self.out = tmp_path / name
        self.results = _load_previous(self.out, self.recipe)
        from quant.results_writer import ResultsWriter

        self.writer = ResultsWriter(self.out, Remote(url), {v.name for v in self.recipe.variants})

    def take(self, name: str, reason: str) -> None:
        variant = next(v for v in self.recipe.variants if v.name == name)
        self.results["variants"][name] = new_record(variant, "failed", reason)
        self.writer.took(name)
        self.writer.save(self.results)


def test_two_sweeps_on_one_out_merge_their_variants(s3, tmp_path):
    """`--only bf16 theirs` and `--only bf16 theirs-wrong3` at once: both started before either wrote."""
    server, _ = s3
    url = f"s3://{BUCKET}/merge/run"
    one, two = Sweep(tmp_path, url, "one"), Sweep(tmp_path, url, "two")
    one.take("bf16", "one's")
    two.take("bf16", "two's")
    one.take("theirs", "one's")
    server.client.put_object(Bucket=BUCKET, Key="merge/run/variants/theirs/evals/demo_math.jsonl", Body=b"{}\n")
    two.take("theirs-wrong3", "two's")
    variants = held(server, "merge/run/results.json")["variants"]
    assert {name: r["reason"] for name, r in variants.items()} == {
        "bf16": "two's", "theirs": "one's", "theirs-wrong3": "two's"}
    # the other sweep's variant comes with its per-item files: this one's reports compare it item by item
    assert (two.out / "variants" / "theirs" / "evals" / "demo_math.jsonl").read_text() == "{}\n"


def test_a_write_between_a_sweeps_read_and_its_write_is_merged_not_lost(s3, tmp_path, monkeypatch):
    """The other sweep writes after this one read the bucket's copy and before it writes: the conditional write
    fails, and this sweep reads again and merges."""
    server, _ = s3
    url = f"s3://{BUCKET}/race/run"
    one, two = Sweep(tmp_path, url, "one"), Sweep(tmp_path, url, "two")
    two.take("bf16", "two's")
    read = Remote.read_whole
    raced = []

    def then_the_other_writes(self, rel):
        got = read(self, rel)
        if not raced:
            raced.append(rel)
            two.take("theirs-wrong3", "two's")
        return got

    monkeypatch.setattr(Remote, "read_whole", then_the_other_writes)
    one.take("theirs", "one's")
    assert raced and set(held(server, "race/run/results.json")["variants"]) == {"bf16", "theirs", "theirs-wrong3"}
    assert set(one.results["variants"]) == {"bf16", "theirs", "theirs-wrong3"}   # its reports show all three


def test_a_results_json_of_another_recipe_written_meanwhile_stops_the_sweep(s3, tmp_path):
    server, _ = s3
    url = f"s3://{BUCKET}/other/run"
    sweep = Sweep(tmp_path, url, "one")
    server.client.put_object(Bucket=BUCKET, Key="other/run/results.json", Body=json.dumps(
        {**sweep.results, "recipe_name": "someone-elses"}).encode())
    with pytest.raises(RemoteError, match="a run of recipe 'someone-elses'"):
        sweep.take("bf16", "x")
    assert held(server, "other/run/results.json")["recipe_name"] == "someone-elses"


@pytest.fixture
def engine(standin_engine):
    """The stand-in engine: the checks before work ask it, not vLLM, what it takes."""
    return standin_engine


def rerun(tmp_path, url: str) -> None:
    recipe = parse_recipe(RECIPE, str(tmp_path / "shared.yaml"))
    run_sweep(recipe, url, cache_dir=tmp_path / "cache", reporter=Reporter(quiet=True), only=["bf16", "theirs"])


def test_a_results_json_read_back_cut_short_stops_an_only_rerun_and_is_kept(s3, tmp_path, engine):
    """200 with half the body and no checksum header, at the start of a `--only` re-run: the sweep stops (the
    CLI's exit 2) before any work, and the earlier variants' records are still there."""
    server, relay = s3
    recipe = parse_recipe(RECIPE)
    earlier = _load_previous(tmp_path / "earlier", recipe)
    earlier["variants"] = {v.name: new_record(v, "failed", "earlier") for v in recipe.variants}
    server.client.put_object(Bucket=BUCKET, Key="cut/run/results.json", Body=json.dumps(earlier).encode())
    relay.fail("GET", "cut/run/results.json", cut_short)
    with pytest.raises(RemoteError, match=r"results.json came back with \d+ of its \d+ bytes"):
        rerun(tmp_path, f"s3://{BUCKET}/cut/run")
    assert set(held(server, "cut/run/results.json")["variants"]) == {"bf16", "theirs", "theirs-wrong3"}


def test_a_results_json_that_is_not_a_run_is_not_replaced(s3, tmp_path, engine):
    server, _ = s3
    server.client.put_object(Bucket=BUCKET, Key="damaged/run/results.json", Body=b'{"recipe_name": "shared", "varia')
    with pytest.raises(RemoteError, match="cannot be read as a run .*--replace-run"):
        rerun(tmp_path, f"s3://{BUCKET}/damaged/run")
    assert server.client.get_object(Bucket=BUCKET, Key="damaged/run/results.json")["Body"].read().endswith(b"varia")
