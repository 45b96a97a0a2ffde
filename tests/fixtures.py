"""Builders of results documents from the typed schema (core.results), so tests state only what they vary.

Each builder returns the JSON-ready dict (a test may then break one field on purpose); `write_run` writes a
run directory's results.json and `write_items` a task's per-item file where the run layout puts them."""

from __future__ import annotations

import json
from pathlib import Path

from core.results import (SCHEMA_VERSION, Accuracy, Latency, PerfPoint, Results, VariantRecord,
                          WorkloadResult)
from core.run_layout import RunLayout

DEFAULT_GATES = {"max_drop": 0.05, "per_task": {"math": 0.02}}


def accuracy(value: float, n: int = 200, metric: str = "exact_match", half_width: float = 0.05, **fields) -> dict:
    return Accuracy(metric=metric, value=value, n=n, ci95=[value - half_width, value + half_width], **fields).dump()


def perf_point(tok_s: float = 100.0, concurrency: int = 16, n: int = 200, ttft_p99: float = 10.0,
               tpot_p99: float = 2.0, **fields) -> dict:
    return PerfPoint(concurrency=concurrency, output_tokens_per_s=tok_s, n=n, errors=0,
                     ttft_ms=Latency(p99=ttft_p99), tpot_ms=Latency(p99=tpot_p99), **fields).dump()


def noisy_level(tok_s: float, concurrency: int = 16, spread: float = 0.05) -> dict:
    """The summary of a level run once whose throughput interval (+-spread) a measured noise floor widened."""
    return {"concurrency": concurrency, "repeats": 1, "method": "one repeat",
            "figures": {"output_tokens_per_s": {"median": tok_s, "ci95": [tok_s * (1 - spread), tok_s * (1 + spread)]}},
            "noise_floor": {"source": "noise-floor.json", "figures": {"output_tokens_per_s": {"log_sd": 0.02, "runs": 5}}}}


def variant(acc: dict[str, float], tok_s: float = 100.0, status: str = "ok", **fields) -> dict:
    """A variant scored `acc` (task -> value); a served one has one perf point at `tok_s` output tokens/s, its
    interval widened by a noise floor."""
    served = status == "ok"
    perf = {"w": WorkloadResult(points=[perf_point(tok_s)], levels=[noisy_level(tok_s)])} if served else {}
    record = VariantRecord(status=status, reason=None if served else "engine: no kernel", checkpoint="/ckpt",
                           size_bytes=1, accuracy={t: accuracy(v) for t, v in acc.items()}, perf=perf, **fields)
    return record.dump()


def results(variants: dict[str, dict], baseline: str = "bf16", gates: dict | None = None, recipe_name: str = "t",
            **fields) -> dict:
    recipe = {"gates": gates or DEFAULT_GATES, "engine": {"args": {"max_model_len": 512}}}
    return Results(schema_version=SCHEMA_VERSION, recipe_name=recipe_name, model="demo", baseline=baseline,
                   variants=variants, recipe=recipe, **fields).dump()


def typed_results(variants: dict[str, dict] | None = None, **fields) -> Results:
    """A typed document (as readers get it): one baseline variant unless `variants` says otherwise."""
    return Results.model_validate(results(variants or {"bf16": variant({})}, **fields))


def write_run(path: Path, variants: dict[str, dict], gates: dict | None = None, **fields) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    RunLayout(path).results.write_text(json.dumps(results(variants, gates=gates, **fields)))
    return path


def write_items(run: Path, name: str, task: str, scores: list[float], metric: str = "exact_match") -> Path:
    """A task's per-item file: item i is prompt "q<i>" scored scores[i]."""
    path = RunLayout(run).variant(name).items(task)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"doc_id": i, "prompt": f"q{i}", "metrics": {metric: s}}) + "\n"
                            for i, s in enumerate(scores)))
    return path


def edit_results(run: Path, change) -> None:
    """Apply change(results dict) to a run's results.json in place (to break or vary one field)."""
    path = RunLayout(run).results
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
