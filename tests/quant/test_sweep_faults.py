"""Faults a sweep survives, on the stand-in engine: the disk under the run directory and cache filling up
mid-sweep (a real full filesystem: a small tmpfs in a private mount namespace), and two sweeps sharing one
stage cache at once."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from tests.helpers import REPO
from tests.quant.test_sweep_standin import starts

RECIPE = """\
name: standin
model: demo
engine: {{args: {{max_model_len: 512}}}}
variants:
  - {{name: bf16, baseline: true}}
  - {{name: theirs, checkpoint: {theirs}}}
  - {{name: other, checkpoint: {other}}}
tasks: [{{name: demo_math, limit: 4}}]
kl_items: 2
perf:
  workloads:
    - {{name: tiny, prompt_tokens: 16, output_tokens: 4, concurrency: [1, 2], requests_per_level: 4, warmup_requests: 1}}
"""

UNSHARE = shutil.which("unshare")


def _private_tmpfs_works() -> bool:
    probe = subprocess.run([UNSHARE, "-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"],
                           capture_output=True) if UNSHARE else None
    return bool(probe) and probe.returncode == 0


def _left_running(marker: str) -> list[str]:
    """Processes whose command line names marker (every process a sweep of this test starts does)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in arg for arg in p.info["cmdline"] or []) and p.status() != psutil.STATUS_ZOMBIE:
                found.append(" ".join(p.info["cmdline"]))
        except psutil.Error:
            pass
    return found


@pytest.mark.slow
def test_a_disk_filling_up_mid_sweep_fails_what_it_hits_and_a_rerun_finishes(
        tmp_path, standin_engine, demo_checkpoints):
    assert _private_tmpfs_works(), "needs unshare -rm and tmpfs in a user namespace"
    recipe = tmp_path / "standin.yaml"
    recipe.write_text(RECIPE.format(theirs=demo_checkpoints("theirs"), other=demo_checkpoints("other")))
    cache, runs, out = tmp_path / "cache-disk", tmp_path / "run-disk", tmp_path / "out"
    for d in (cache, runs, out):
        d.mkdir()
    sweep = f"{sys.executable} -m quant.cli sweep {recipe} --out {runs}/run --cache-dir {cache}/cache"
    fill = "dd if=/dev/zero of={}/ballast bs=64k 2>/dev/null; sync"
    # 1. the cache's disk fills up once the baseline is finished (its per-task file written);
    # 2. the run directory's disk is full too; 3. space freed on both.
    script = textwrap.dedent(f"""
        mount -t tmpfs -o size=64m tmpfs {cache} && mount -t tmpfs -o size=64m tmpfs {runs} || exit 99
        (while [ ! -e {runs}/run/variants/bf16/accuracy.jsonl ]; do sleep 0.02; done; {fill.format(cache)}) &
        {sweep} > {out}/1.out 2> {out}/1.err; echo $? > {out}/1.rc
        wait
        cp {runs}/run/results.json {out}/1.json
        {fill.format(runs)}
        {sweep} > {out}/2.out 2> {out}/2.err; echo $? > {out}/2.rc
        rm {cache}/ballast {runs}/ballast
        {sweep} > {out}/3.out 2> {out}/3.err; echo $? > {out}/3.rc
        cp {runs}/run/results.json {out}/3.json
    """)
    subprocess.run([UNSHARE, "-rm", "sh", "-c", script], cwd=REPO, check=True, timeout=900)
    rc = lambda n: int((out / f"{n}.rc").read_text())
    err = lambda n: (out / f"{n}.err").read_text()

    first = json.loads((out / "1.json").read_text())["variants"]
    assert rc(1) == 1 and "Traceback" not in err(1), err(1)
    assert {name: v["status"] for name, v in first.items()} == {"bf16": "ok", "theirs": "failed", "other": "failed"}
    assert all("No space left on device" in first[n]["reason"] for n in ("theirs", "other")), first
    assert rc(2) == 1 and "Traceback" not in err(2), err(2)
    assert err(2).strip().splitlines()[-1].startswith("sweep error: ") and "No space left on device" in err(2)
    assert not _left_running(str(tmp_path))

    third = json.loads((out / "3.json").read_text())["variants"]
    assert rc(3) == 0, err(3)
    assert {name: v["status"] for name, v in third.items()} == {"bf16": "ok", "theirs": "ok", "other": "ok"}
    assert third["bf16"]["accuracy"] == first["bf16"]["accuracy"]
    assert starts(standin_engine).count("bf16") == 1   # the baseline came from the cache every time


HOLDER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {repo!r})
    from core.store import Cache
    cache = Cache({root!r})
    with cache.building("evals", "k1") as needed:
        print(needed, flush=True)
        time.sleep(1.5)
        cache.save_json("evals", "k1", {{"by": "holder"}})
""")


def test_a_cache_key_is_built_by_one_sweep_while_another_waits_for_it(tmp_path):
    from core.store import Cache

    holder = subprocess.Popen([sys.executable, "-c", HOLDER.format(repo=str(REPO), root=str(tmp_path / "c"))],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "True"   # it holds the key's lock now
    waited = []
    with Cache(tmp_path / "c").building("evals", "k1", on_wait=lambda: waited.append(1)) as needed:
        assert not needed and waited == [1]   # it waited, then found the stage built
    assert Cache(tmp_path / "c").load_json("evals", "k1") == {"by": "holder"} and holder.wait() == 0
    with Cache(tmp_path / "c").building("evals", "k2") as needed:   # other keys are not held up
        assert needed


TWO = """\
name: standin
model: demo
engine: {{args: {{max_model_len: 512}}}}
variants:
  - {{name: bf16, baseline: true}}
  - {{name: theirs, checkpoint: {theirs}}}
tasks: [{{name: demo_math, limit: 4}}]
perf:
  workloads:
    - {{name: tiny, prompt_tokens: 16, output_tokens: 4, concurrency: [1], requests_per_level: 4, warmup_requests: 1}}
"""


@pytest.mark.slow
def test_two_sweeps_sharing_one_cache_at_once_agree_and_a_third_is_served_from_it(
        tmp_path, standin_engine, demo_checkpoints):
    recipe = tmp_path / "standin.yaml"
    recipe.write_text(TWO.format(theirs=demo_checkpoints("theirs")))
    sweep = lambda out: [sys.executable, "-m", "quant.cli", "sweep", str(recipe), "--out", str(tmp_path / out),
                         "--cache-dir", str(tmp_path / "cache")]
    runs = [subprocess.Popen(sweep(out), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for out in ("a", "b")]
    outputs = [run.communicate(timeout=900) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], [err[-2000:] for _, err in outputs]
    logs = "".join(err for _, err in outputs)
    assert logs.count("demo_math: exact_match") == 2, logs   # each variant's eval scored by one of them
    a, b = (json.loads((tmp_path / out / "results.json").read_text())["variants"] for out in ("a", "b"))
    for name in ("bf16", "theirs"):
        assert a[name]["accuracy"] == b[name]["accuracy"] and a[name]["perf"] == b[name]["perf"]
    engine_starts = len(starts(standin_engine))
    code = subprocess.run(sweep("c"), cwd=REPO, capture_output=True).returncode
    c = json.loads((tmp_path / "c" / "results.json").read_text())["variants"]
    assert code == 0 and len(starts(standin_engine)) == engine_starts   # no engine: every stage cached
    assert {n: (v["accuracy"], v["perf"]) for n, v in c.items()} == {n: (v["accuracy"], v["perf"]) for n, v in a.items()}
