"""The recipe's perf section: load profiles (lengths, arrivals, dirt, traces, rate search) and SLOs."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from core.strict import Strict


class Lengths(Strict):
    """A token-length distribution (perf/lengths.py). `dist: empirical` samples `values` or a file's
    integers (one per line, or a JSONL field `field`)."""
    dist: Literal["fixed", "uniform", "normal", "lognormal", "empirical"]
    value: int | None = Field(default=None, ge=1)      # fixed
    mean: float | None = Field(default=None, gt=0)     # normal, lognormal (the distribution's own mean)
    std: float | None = Field(default=None, ge=0)      # normal
    sigma: float | None = Field(default=None, gt=0)    # lognormal: of the underlying normal
    min: int = Field(default=1, ge=1)
    max: int | None = Field(default=None, ge=1)
    values: list[int] | None = None
    file: str | None = None
    field: str | None = None

    @model_validator(mode="after")
    def _complete(self) -> "Lengths":
        need = {"fixed": ["value"], "uniform": ["max"], "normal": ["mean", "std"], "lognormal": ["mean", "sigma"],
                "empirical": []}[self.dist]
        missing = [k for k in need if getattr(self, k) is None]
        if missing:
            raise ValueError(f"dist {self.dist} needs {', '.join(missing)}")
        if self.dist == "empirical" and not (self.values or self.file):
            raise ValueError("dist empirical needs values or file")
        if self.max is not None and self.max < self.min:
            raise ValueError("max must be >= min")
        return self


# An int is a fixed length; a mapping is a distribution (one error message for either, not two).
LengthSpec = Annotated[Union[Annotated[int, Field(ge=1), Tag("fixed")], Annotated[Lengths, Tag("dist")]],
                       Discriminator(lambda v: "dist" if isinstance(v, (dict, Lengths)) else "fixed")]


class Share(Strict):
    fraction: float = Field(gt=0, le=1)
    tokens: int | None = Field(default=None, ge=1)   # long prompts: their length; shared prefix: its length
    size: int | None = Field(default=None, ge=2)     # bursts: requests arriving together


class RateSearch(Strict):
    """Find the highest request rate whose SLO attainment (perf.slo) is at least `attainment`: probe `low`
    and `high`, then bisect (geometrically) `probes` more times."""
    low: float = Field(gt=0)
    high: float = Field(gt=0)
    probes: int = Field(default=4, ge=1, le=12)
    attainment: float = Field(default=0.99, gt=0, le=1)

    @model_validator(mode="after")
    def _ordered(self) -> "RateSearch":
        if self.high <= self.low:
            raise ValueError("high must be greater than low")
        return self


GPU_REPEATS, CPU_REPEATS = 3, 1


class Workload(Strict):
    """A load profile: request lengths, how requests arrive, and dirt on top (perf/requests.py)."""
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    prompt_tokens: LengthSpec = 128
    output_tokens: LengthSpec = 64
    # closed: `concurrency` workers, each sending its next request when the last ends.
    # constant | poisson | gamma: open loop at each of `rates` (requests/s); gamma's `burstiness` < 1 is
    # burstier than Poisson (= 1), > 1 more regular, as in vLLM's benchmark.
    arrival: Literal["closed", "constant", "poisson", "gamma"] = "closed"
    concurrency: list[int] = Field(default_factory=lambda: [1, 4, 16])
    rates: list[float] | None = None
    burstiness: float = Field(default=1.0, gt=0)
    max_concurrency: int | None = Field(default=None, ge=1)   # open loop: cap on requests in flight
    requests_per_level: int | None = Field(default=None, ge=1)  # default: max(16, 8 x level)
    warmup_requests: int = Field(default=4, ge=0)
    long_prompts: Share | None = None    # dirty load: this fraction of prompts have `tokens` tokens
    bursts: Share | None = None          # this fraction extra, in groups of `size` arriving at one instant
    shared_prefix: Share | None = None   # this fraction of prompts start with the same `tokens` tokens
    trace: str | None = None             # JSONL request log: arrival_s (or timestamp), input_tokens, output_tokens
    trace_speedup: float = Field(default=1.0, gt=0)
    rate_search: RateSearch | None = None   # open loop: levels chosen by the search instead of `rates`
    # Runs of each level, each with fresh prompts; the tables show their median and interval. Unset: 3 on a GPU
    # engine (as `vllm bench sweep`), 1 on a CPU one, where a level takes many times longer.
    repeats: int | None = Field(default=None, ge=1, le=15)
    # A level's measured time (warm-up excluded): at least min_seconds (more fresh requests where the planned
    # ones end sooner), at most max_seconds (no request sent after it, those in flight finish).
    min_seconds: float | None = Field(default=None, gt=0)
    max_seconds: float | None = Field(default=None, gt=0)

    @field_validator("concurrency")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        if not v or any(c < 1 for c in v):
            raise ValueError("concurrency levels must be a non-empty list of integers >= 1")
        return v

    @field_validator("rates")
    @classmethod
    def _positive_rates(cls, v: list[float] | None) -> list[float] | None:
        if v is not None and (not v or any(r <= 0 for r in v)):
            raise ValueError("rates must be a non-empty list of requests/s > 0")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> "Workload":
        if self.arrival != "closed" and not self.rates and not self.trace and not self.rate_search:
            raise ValueError(f"arrival {self.arrival} needs rates (requests/s) or rate_search")
        if self.rate_search and self.arrival == "closed":
            raise ValueError("rate_search needs an open-loop arrival (constant, poisson or gamma)")
        if self.bursts and not self.bursts.size:
            raise ValueError("bursts needs size")
        if self.long_prompts and not self.long_prompts.tokens:
            raise ValueError("long_prompts needs tokens")
        if self.shared_prefix and not self.shared_prefix.tokens:
            raise ValueError("shared_prefix needs tokens")
        if self.min_seconds and self.max_seconds and self.min_seconds > self.max_seconds:
            raise ValueError("min_seconds must be <= max_seconds")
        return self

    def repeats_on(self, gpu: bool) -> int:
        """Runs of each level: the recipe's `repeats`, else GPU_REPEATS on a GPU engine, CPU_REPEATS on a CPU."""
        return self.repeats or (GPU_REPEATS if gpu else CPU_REPEATS)

    @property
    def open_loop(self) -> bool:
        return self.arrival != "closed" or self.trace is not None

    def levels(self) -> list[tuple[str, float]]:
        """("concurrency", c) per closed level, ("rate", r) per open one, ("trace", speedup) for a trace."""
        if self.trace:
            return [("trace", self.trace_speedup)]
        if self.arrival == "closed":
            return [("concurrency", c) for c in self.concurrency]
        if self.rate_search:   # the first two probes; the rest depend on their results
            return [("rate", self.rate_search.low), ("rate", self.rate_search.high)]
        return [("rate", r) for r in self.rates]


class Slo(Strict):
    """Per-request latency bounds in ms; a request meeting every named bound counts toward goodput."""
    ttft_ms: float | None = Field(default=None, gt=0)
    tpot_ms: float | None = Field(default=None, gt=0)
    e2e_ms: float | None = Field(default=None, gt=0)

    def bounds(self) -> dict[str, float]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


class Perf(Strict):
    workloads: list[Workload] = Field(default_factory=lambda: [Workload(name="fixed-128-64")])
    slo: Slo | None = None   # goodput and SLO attainment per perf point (vLLM's --goodput definition)
    # The deploy target for memory accounting: how many sequences of the first workload's length fit in the
    # KV cache beside each variant's weights (perf/memory.py).
    accelerator_memory_gib: float = Field(default=80.0, gt=0)
    memory_utilization: float = Field(default=0.9, gt=0, le=1)
    # This machine's run-to-run noise (benchmarks/noise_floor.py writes it): widens every level's intervals, so
    # that speed is ranked only beyond it (perf/noise.py). Unset: a level run once is not ranked by speed.
    noise_floor: str | None = None
