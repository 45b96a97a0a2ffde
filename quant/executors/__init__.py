"""Where a sweep's variants run: one after another in this process (`local`), or fanned out over a Ray
cluster (`ray`). Both take the sweep's one-variant pipeline (`run_one(ctx, variant) -> record`), run the
baseline first (its KL reference is what the others are scored against), and yield (variant, record) as
variants finish: the executor decides where a variant runs, never what it records."""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Iterator

from core.recipe import Execution, Variant
from perf.isolation import placement
from quant.ahead import QuantizeAhead, to_build_ahead
from quant.measure import engine_to_start_ahead
from quant.quantize_stage import checkpoint_for
from quant.start_ahead import StartAhead

RunOne = Callable[..., dict]


def run_local(ctx, variants: list[Variant], execution: Execution, run_one: RunOne) -> Iterator[tuple[Variant, dict]]:
    """One variant after another; where the engine runs on the CPU, the next ones are quantized meanwhile
    (quant/ahead.py) and the next one's server starts while one's evals run (quant/start_ahead.py)."""
    later = to_build_ahead(ctx, variants)
    ahead = QuantizeAhead(ctx, later, checkpoint_for) if later else None
    if ahead:
        ctx = dataclasses.replace(ctx, ahead=ahead)
    starts = StartAhead(ctx, variants, engine_to_start_ahead) if len(variants) > 1 else None
    if starts:
        ctx = dataclasses.replace(ctx, starts=starts)
    try:
        for variant in variants:
            ctx.reporter.log(f"[bold cyan]{variant.name}[/bold cyan]")
            started = time.time()
            record = run_one(ctx, variant)
            record["ran_on"] = {**placement(), **record.get("ran_on", {}), "executor": "local", "started": started,
                                "finished": time.time()}
            yield variant, record
    finally:   # the quantizer first: a start that waits for its checkpoint then ends at once
        if ahead:
            ahead.close()
        if starts:
            starts.close()


def _run_ray(ctx, variants: list[Variant], execution: Execution, run_one: RunOne) -> Iterator[tuple[Variant, dict]]:
    from quant.executors.ray import run_ray   # ray is an optional extra
    return run_ray(ctx, variants, execution, run_one)


EXECUTORS: dict[str, Callable[..., Iterator[tuple[Variant, dict]]]] = {"local": run_local, "ray": _run_ray}


def run_variants(ctx, variants: list[Variant], execution: Execution, run_one: RunOne) -> Iterator[tuple[Variant, dict]]:
    ordered = sorted(variants, key=lambda v: not v.baseline)
    return EXECUTORS[execution.executor](ctx, ordered, execution, run_one)
