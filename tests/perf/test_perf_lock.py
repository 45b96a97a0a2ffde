"""The perf lock cannot be turned against another file or user: its directory is this user's own (a planted
link, another owner or a world-writable one is refused), its file is never followed through a link nor
chmod'ed, and a wait names the holder."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

from perf import isolation
from perf.isolation import PerfLockError, exclusive_perf


@pytest.fixture
def tmp_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv(isolation.LOCK_DIR_VAR, raising=False)
    return tmp_path / f"quant-suite-{os.getuid()}"


def test_the_lock_lives_in_a_private_directory_and_is_never_chmodded(tmp_dir):
    with exclusive_perf("node"):
        pass
    assert oct(tmp_dir.stat().st_mode & 0o777) == "0o700"
    assert (tmp_dir / "quant-suite-perf-node.lock").is_file()


def test_a_link_planted_as_the_lock_changes_nothing(tmp_dir, tmp_path):
    tmp_dir.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("x")
    victim.chmod(0o600)
    (tmp_dir / "quant-suite-perf-node.lock").symlink_to(victim)
    with pytest.raises(PerfLockError, match="never followed"):
        with exclusive_perf("node"):
            pass
    assert oct(victim.stat().st_mode & 0o777) == "0o600" and victim.read_text() == "x"


@pytest.mark.parametrize("plant", ["link", "world-writable"])
def test_a_lock_directory_someone_else_could_have_made_is_passed_over(tmp_dir, tmp_path, plant):
    if plant == "link":
        (tmp_path / "theirs").mkdir()
        tmp_dir.symlink_to(tmp_path / "theirs")
    else:
        tmp_dir.mkdir()
        tmp_dir.chmod(0o777)
    with exclusive_perf("node"):
        pass
    ours = tmp_dir.with_name(tmp_dir.name + ".1")
    assert (ours / "quant-suite-perf-node.lock").is_file() and oct(ours.stat().st_mode & 0o777) == "0o700"
    assert not (tmp_path / "theirs" / "quant-suite-perf-node.lock").exists()
    assert isolation.lock_dir() == ours   # every process of this user meets on the same one


def test_when_every_candidate_is_taken_the_lock_says_why_and_what_to_do(tmp_dir):
    for n in range(isolation.PRIVATE_CANDIDATES):
        planted = tmp_dir if n == 0 else tmp_dir.with_name(f"{tmp_dir.name}.{n}")
        planted.mkdir()
        planted.chmod(0o777)
    with pytest.raises(PerfLockError, match=f"writable by others.*{isolation.LOCK_DIR_VAR}"):
        with exclusive_perf("node"):
            pass


def test_a_lock_that_cannot_be_taken_fails_that_variants_perf_with_the_reason(tmp_dir, monkeypatch):
    """Not the sweep: the stage records why and returns; the variant's other measurements stand."""
    from types import SimpleNamespace

    from core.recipe import parse_recipe
    from quant.perf_stage import PerfStage

    recipe = parse_recipe("name: r\nmodel: demo\nvariants: [{name: bf16, baseline: true}]\ntasks: [demo_math]\n"
                          "perf: {workloads: [{name: w, prompt_tokens: 8, output_tokens: 2, concurrency: [1]}]}\n")
    logged = []
    ctx = SimpleNamespace(recipe=recipe, engine_facts={}, engine_key="k", ahead=None, starts=None,
                          variant_dir=lambda name: tmp_dir.parent / name,
                          cache=SimpleNamespace(has=lambda *a: False),
                          reporter=SimpleNamespace(log=lambda line, style=None: logged.append(line)))
    stage = PerfStage(ctx, recipe.variants[0], SimpleNamespace(key="ck"), {})
    tmp_dir.symlink_to("/")
    monkeypatch.setattr(isolation, "PRIVATE_CANDIDATES", 1)
    stage.run(session=None)
    record = {"status": "ok", "reason": None, "accuracy": {"demo_math": {"acc": 0.5}}, "perf": {}}
    stage.collect(record)
    assert record["status"] == "failed" and record["reason"].startswith("perf: perf lock directory")
    assert record["accuracy"] == {"demo_math": {"acc": 0.5}}
    assert any("perf not measured: perf lock directory" in line for line in logged)


def test_a_wait_names_the_holder(tmp_dir):
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from perf.isolation import exclusive_perf\n"
        "with exclusive_perf('node'):\n    print('held', flush=True); time.sleep(1.5)")],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp_dir.parent)})
    assert holder.stdout.readline().strip() == "held"
    waits = []
    with exclusive_perf("node", on_wait=lambda lock, who: waits.append((lock, who))) as where:
        assert where["waited_s"] > 0.3
    holder.wait()
    assert waits == [("node", waits[0][1])] and waits[0][1].startswith(f"pid {holder.pid} on ")
