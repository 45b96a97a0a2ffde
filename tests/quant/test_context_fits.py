"""A context the model cannot hold is refused before work: max_model_len above config.json's
max_position_embeddings (the engine would refuse it only at start-up), unless vLLM's override is set."""

from __future__ import annotations

from core.recipe import parse_recipe
from quant.validate import validate

RECIPE = """\
name: long
model: demo
engine: {{args: {{max_model_len: {length}}}{env}}}
variants:
  - {{name: bf16, baseline: true}}
tasks: [{{name: demo_math, limit: 2}}]
"""


def errors(length: int, env: str = "") -> list[str]:
    recipe = parse_recipe(RECIPE.format(length=length, env=env), "long.yaml")
    return validate(recipe, None, engine=False).errors


def test_max_model_len_above_the_models_positions_is_refused_before_work():
    (line,) = [e for e in errors(4096) if "max_position_embeddings" in e]
    assert "max_model_len 4096 (engine.args) is above the model's max_position_embeddings 512" in line
    assert not [e for e in errors(512) if "max_position_embeddings" in e]
    assert not [e for e in errors(4096, ", env: {VLLM_ALLOW_LONG_MAX_MODEL_LEN: '1'}")
                if "max_position_embeddings" in e]
