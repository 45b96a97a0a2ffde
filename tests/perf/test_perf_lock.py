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
def test_a_lock_directory_someone_else_could_have_made_is_refused(tmp_dir, tmp_path, plant):
    if plant == "link":
        (tmp_path / "theirs").mkdir()
        tmp_dir.symlink_to(tmp_path / "theirs")
    else:
        tmp_dir.mkdir()
        tmp_dir.chmod(0o777)
    with pytest.raises(PerfLockError, match="not a directory|writable by others"):
        with exclusive_perf("node"):
            pass


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
