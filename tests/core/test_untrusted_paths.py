"""Runs and caches at URLs, and the results.json of a run someone else wrote, are read as untrusted: every key
a bucket lists and every name read from results.json or `.reports.json` is checked before it becomes a path."""

from __future__ import annotations

import json
import shutil
import uuid

import fsspec
import pytest

from core.remote import Remote, RemoteError, pull_run
from core.run_layout import RunLayout
from core.safe_paths import UnsafePath, checked_key, inside
from quant.cli import main as quant_main
from reports.render import RENDERED, already_rendered
from tests.helpers import REPO

DEMO = REPO / "tests" / "data" / "demo_run"


@pytest.fixture
def bucket():
    url = f"memory://bucket-{uuid.uuid4().hex[:8]}/run"
    yield url
    fsspec.filesystem("memory").rm(url.removeprefix("memory://").split("/")[0], recursive=True)


@pytest.mark.parametrize("key", ["../escape.txt", "a/../../x", "/etc/passwd", "a//b", "./a", "a\\..\\b", ""])
def test_a_key_that_leads_outside_is_refused(key):
    with pytest.raises(UnsafePath):
        checked_key(key)


def test_a_bucket_key_with_dots_is_never_written_outside_the_mirror(tmp_path, bucket, monkeypatch):
    monkeypatch.setenv("QUANT_MIRROR_DIR", str(tmp_path / "mirrors"))
    fs = fsspec.filesystem("memory")
    fs.pipe(f"{bucket.removeprefix('memory://')}/results.json", b'{"variants": {"a": {}}}')
    fs.pipe(f"{bucket.removeprefix('memory://')}/variants/a/../../../../escaped.txt", b"x")
    with pytest.raises(RemoteError, match="leads outside its directory"):
        pull_run(bucket)
    assert not list(tmp_path.rglob("escaped.txt"))
    with pytest.raises(RemoteError, match="remote key '../x' leads outside"):
        Remote(bucket).upload_file(tmp_path / "mirrors", "../x")


def test_a_symlink_in_the_mirror_does_not_lead_a_download_outside(tmp_path, bucket):
    fsspec.filesystem("memory").pipe(f"{bucket.removeprefix('memory://')}/variants/a.txt", b"x")
    local = tmp_path / "mirror"
    local.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (local / "variants").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(RemoteError, match="through a symbolic link"):
        Remote(bucket).download_dir("", local)
    assert not (tmp_path / "elsewhere" / "a.txt").exists()


def test_a_file_run_never_hands_over_what_its_links_point_to(tmp_path):
    """A file:// run whose variant folder links to a private file (or a linked folder) of the user's: the link
    is not followed, so nothing of the user's becomes a world-readable file of the shared run."""
    secret = tmp_path / "credentials"
    secret.write_text("aws_secret_access_key = s3cr3t")
    secret.chmod(0o600)
    (tmp_path / "private").mkdir()
    (tmp_path / "private" / "token").write_text("hf_secret")
    run = tmp_path / "theirs"
    (run / "variants" / "v").mkdir(parents=True)
    (run / "variants" / "v" / "accuracy.jsonl").write_text("{}\n")
    (run / "variants" / "v" / "server.log").symlink_to(secret)
    (run / "variants" / "v" / "more").symlink_to(tmp_path / "private")
    (run / "linked").symlink_to(run / "variants")
    local = tmp_path / "mirror"
    assert Remote(f"file://{run}").download_dir("", local) == 1
    assert [p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file()] == ["variants/v/accuracy.jsonl"]


def test_a_variant_name_in_results_json_never_becomes_a_path_outside_the_run(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(DEMO, run)
    results = json.loads((run / "results.json").read_text())
    results["variants"]["../../escaped"] = results["variants"].pop("w4a16-gptq")
    results["variants"]["../../escaped"]["name"] = "../../escaped"
    (run / "results.json").write_text(json.dumps(results))
    assert quant_main(["report", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "variant '../../escaped' is not a name this suite writes" in err[0]
    assert not list(tmp_path.rglob("vllm-bench-*.json"))
    with pytest.raises(UnsafePath):
        RunLayout(run).variant("..")


def test_a_reports_stamp_naming_files_outside_the_run_is_not_trusted(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (tmp_path / "secret").write_text("s")
    (run / RENDERED).write_text(json.dumps({"key": "k", "files": ["../secret"]}))
    assert already_rendered(run, "k") is None
    (run / RENDERED).write_text(json.dumps({"key": "k", "files": [str(tmp_path / "secret")]}))
    assert already_rendered(run, "k") is None
    (run / "link").symlink_to(tmp_path / "secret")
    with pytest.raises(UnsafePath, match="symbolic link"):
        inside(run, "link")
