"""`quant export --push-to-hub`: the real huggingface_hub client uploads the folder to the stand-in hub
(tests/hub_standin.py) as it uploads to the hub: a repo created private unless --public, the weights through
git LFS, the repo left holding exactly the folder, and no commit for a folder the hub already holds."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from core import exit_codes
from tests.fixtures import edit_results, variant, write_run
from tests.helpers import DEMO_MODEL, quant
from tests.hub_standin import GRANTED_TOKEN, HubStandin


@pytest.fixture
def run(tmp_path) -> Path:
    """A run of two variants whose checkpoints differ: `trimmed` lacks generation_config.json."""
    path = write_run(tmp_path / "run", {"bf16": variant({"math": 0.9}), "trimmed": variant({"math": 0.9})})
    for name in ("bf16", "trimmed"):
        shutil.copytree(DEMO_MODEL, tmp_path / "ckpt" / name)
    (tmp_path / "ckpt" / "trimmed" / "generation_config.json").unlink()
    edit_results(path, lambda r: [r["variants"][n].update(checkpoint=str(tmp_path / "ckpt" / n))
                                  for n in ("bf16", "trimmed")])
    return path


def push(hub: HubStandin, home: Path, *argv: str, token: str | None = GRANTED_TOKEN) -> tuple[int, str]:
    env = {**os.environ, **hub.env(home, token=token)}
    if token is None:
        env.pop("HF_TOKEN", None)
    return quant("export", *argv, env=env, timeout=300)


def repo_files(hub: HubStandin, repo_id: str) -> dict[str, bytes]:
    repo = hub.repos[("model", repo_id)]
    return repo.commits[repo.refs["main"]]


def test_a_push_uploads_the_folder_privately_once_and_the_repo_follows_the_folder(run, tmp_path):
    folder = tmp_path / "out" / "bf16"
    with HubStandin() as hub:
        code, out = push(hub, tmp_path, f"{run}:bf16", str(folder), "--push-to-hub", "org/card")
        assert code == 0, out
        assert f"pushed to {hub.url}/org/card" in out
        files = repo_files(hub, "org/card")
        local = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
        assert {k: v for k, v in files.items() if k != ".gitattributes"} == local
        assert hub.repos[("model", "org/card")].private
        weights = (folder / "model.safetensors").read_bytes()
        assert hub.lfs[hashlib.sha256(weights).hexdigest()] == weights   # the weights went through LFS
        assert f"--model {hub.url}" not in files["README.md"].decode() and "--model org/card" in \
            files["README.md"].decode()

        code, out = push(hub, tmp_path, f"{run}:bf16", str(folder), "--force", "--push-to-hub", "org/card")
        assert code == 0 and "already holds this folder" in out and "nothing pushed" in out, out
        assert len(hub.commits_made) == 1

        code, out = push(hub, tmp_path, f"{run}:trimmed", str(folder), "--force", "--push-to-hub", "org/card")
        assert code == 0 and "pushed to" in out, out
        assert len(hub.commits_made) == 2
        assert "generation_config.json" not in repo_files(hub, "org/card")   # the repo holds exactly the folder
        assert "# quant-suite's demo model: trimmed" in repo_files(hub, "org/card")["README.md"].decode()
        assert hub.unanswered == []


def test_public_only_when_asked(run, tmp_path):
    with HubStandin() as hub:
        code, out = push(hub, tmp_path, f"{run}:bf16", str(tmp_path / "o"), "--push-to-hub", "org/open", "--public")
        assert code == 0, out
        assert not hub.repos[("model", "org/open")].private


@pytest.mark.parametrize("repo, token, says", [("org/x", None, "pushing needs a token with write access"),
                                               ("not a repo", GRANTED_TOKEN, "not a hub repo id")])
def test_a_push_that_cannot_be_made_is_refused_before_any_work(run, tmp_path, repo, token, says):
    with HubStandin() as hub:
        code, out = push(hub, tmp_path, f"{run}:bf16", str(tmp_path / "o"), "--push-to-hub", repo, token=token)
        assert hub.requests == []
    assert code == exit_codes.BAD_INPUT and out.startswith("export error: --push-to-hub") and says in out
    assert len(out.strip().splitlines()) == 1 and not (tmp_path / "o").exists()


def test_a_rejected_token_is_one_line_and_the_folder_stays(run, tmp_path):
    with HubStandin() as hub:
        code, out = push(hub, tmp_path, f"{run}:bf16", str(tmp_path / "o"), "--push-to-hub", "org/x",
                         token="hf_not_a_token")
    assert code == exit_codes.FAILED and "export error: push: " in out and "rejected the token" in out, out
    assert "Traceback" not in out and (tmp_path / "o" / "README.md").is_file()
