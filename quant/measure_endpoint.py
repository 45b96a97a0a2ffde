"""An endpoint variant's turn: its evals, KL and perf against the running server the recipe names, probed before
the sweep began (quant/endpoint_probe.py). Nothing is quantized, started or stopped. What the server cannot
give is listed under the record's not_measurable; a server that stops answering ends the variant's turn with
that named as its reason, keeping everything measured before it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.markup import escape

from core.hashing import digest
from core.recipe import Variant
from core.store import write_jsonl
from perf.engines.endpoint import ALIGNED, EndpointProblem, EndpointServer, probe
from perf.engines.llamacpp import LlamaCppServer
from perf.engines.process import DEATH_WAIT_S, EngineDiedError, EngineStartError
from quant.context import Checkpoint, Session, SweepContext, new_record
from quant.eval_stage import EvalStage
from quant.kl_stage import KlStage
from quant.measure import run_stages
from quant.perf_stage import PerfStage
from quant.timing import timed

NOT_OURS_TO_SEE = "the server's processes are not the suite's to see (an endpoint)"


def endpoint_checkpoint(ctx: SweepContext, variant: Variant) -> Checkpoint:
    """The recipe's model stands for the weights (its tokenizer scores and prompts); the cache key is this
    probe's, so a later sweep measures the endpoint anew (what it serves may have changed)."""
    facts = ctx.endpoints[variant.name]
    spec = variant.endpoint or variant.llamacpp
    key = digest("endpoint", spec.model_dump(mode="json"), facts["probed"], ctx.model_key)
    return Checkpoint(path=ctx.model_dir, key=key, manifest={"endpoint": facts}, size_bytes=0)


def run_llamacpp_variant(ctx: SweepContext, variant: Variant) -> dict:
    """The GGUF file on a llama.cpp server started for this turn (stopped at its end), probed once ready and
    then measured as an endpoint; its weights are the file, its memory its process tree's."""
    spec, found = variant.llamacpp, ctx.endpoints[variant.name]
    server = LlamaCppServer(Path(found["gguf"]), python=found["python"], served_name=variant.name, args=spec.args,
                            log_path=ctx.variant_dir(variant.name) / "server.log",
                            startup_timeout_s=spec.startup_timeout_s)
    record = new_record(variant)
    ctx.reporter.log(f"  starting llama.cpp on 127.0.0.1 ({Path(found['gguf']).name}) …")
    try:
        with timed(record, "engine_start"):
            server.start()
    except EngineStartError as exc:
        return {**record, "status": "failed", "reason": f"the engine did not start: {exc}"}
    try:
        try:
            facts = probe(server.base_url, variant.name)
        except EndpointProblem as exc:
            return {**record, "status": "failed", "reason": f"the llama.cpp server did not answer its probe: {exc}"}
        ctx.endpoints[variant.name] = {**facts, **found, "engine": "llama.cpp"}
        record = run_endpoint_variant(ctx, variant, server, record)
        size = Path(found["gguf"]).stat().st_size
        record.update(size_bytes=size, serve_command=server.deploy_command)
        record["memory"]["weights_bytes"] = size
        return record
    finally:
        server.stop()


def run_endpoint_variant(ctx: SweepContext, variant: Variant, server=None, record: dict | None = None) -> dict:
    """`server`: a server this turn started (llama.cpp); None for the recipe's endpoint, which is not ours."""
    record = record or new_record(variant)
    facts = ctx.endpoints[variant.name]
    if server is None:
        spec = variant.endpoint
        server = EndpointServer(spec.base_url, spec.model, spec.api_key_env, facts)
        record["not_measurable"] = {"memory": {"server_rss_bytes": NOT_OURS_TO_SEE, "weights_bytes": NOT_OURS_TO_SEE}}
    checkpoint = endpoint_checkpoint(ctx, variant)
    record.update(endpoint=facts, served=True, eval_backend="served")
    unscorable = None if facts.get("prompt_logprobs") == ALIGNED else facts.get("prompt_logprobs")
    evals = EvalStage(ctx, variant, checkpoint, "served", {"endpoint": facts["base_url"]})
    stages = [evals, KlStage(ctx, variant, evals.keys), PerfStage(ctx, variant, checkpoint, {})]

    @contextmanager
    def session() -> Iterator[Session]:
        from evals.backends.served import ServedLM, RequestRejected   # lm-eval: only when a stage has work

        ctx.reporter.log(escape(f"  endpoint {server.base_url} (model {server.model}); prompt log-probabilities: "
                                f"{facts.get('prompt_logprobs')}"))
        lm = ServedLM(server.completions_url, server.model, tokenizer_dir=ctx.model_dir,
                      concurrency=ctx.recipe.eval_concurrency, headers=server.headers, unscorable=unscorable)
        try:
            yield Session(lm, server)
        except (EngineDiedError, RequestRejected):
            raise
        except Exception as exc:   # a stage failed: because the endpoint stopped serving?
            server.check_alive(wait_s=DEATH_WAIT_S)
            raise exc

    try:
        run_stages(stages, session, record)
    except EngineDiedError as exc:
        _lost(ctx, record, stages, str(exc))
        record.setdefault("engine_deaths", []).append(str(exc))
    except Exception as exc:  # noqa: BLE001 - a failing endpoint fails this variant, keeping what it measured
        _lost(ctx, record, stages, f"the endpoint {server.base_url} started failing: {type(exc).__name__}: "
                                   f"{str(exc)[:300]}")
    if unscorable and ctx.recipe.kl_items and not variant.baseline:   # with or without a baseline in this run
        kl = record.setdefault("not_measurable", {}).setdefault("kl", {})
        for task in evals.keys:
            kl.setdefault(task, f"prompt log-probabilities: {unscorable}")
    write_jsonl(ctx.variant_dir(variant.name) / "accuracy.jsonl",
                [{"task": t, **a} for t, a in record["accuracy"].items()])
    return record


def _lost(ctx: SweepContext, record: dict, stages: list, reason: str) -> None:
    """The variant failed mid-run: its reason, and what the stages finished before it, kept."""
    ctx.reporter.log(f"  {escape(reason)}", style="red")
    for stage in stages:
        stage.collect(record)
    record.update(status="failed", reason=reason)
