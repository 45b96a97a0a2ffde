"""The GPU recipes (recipes/codegen.yaml, recipes/instruct-8b.yaml) pass every check a sweep makes before any
work, without a GPU: the schema, the schemes and group sizes against the real model's Linear shapes (its
config.json, with the real dimensions, served by the stand-in hub), the task names and their hub data, and a
gate policy that can decide on the tasks' item counts."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from tests.helpers import REPO
from tests.hub_standin import GRANTED_TOKEN, HubStandin, tiny_dataset_files

CONFIGS = REPO / "tests/data/hub_configs"
RECIPES = {"codegen": ("Qwen/Qwen2.5-Coder-1.5B-Instruct", False),
           "instruct-8b": ("meta-llama/Llama-3.1-8B-Instruct", True)}   # (model, gated)
# Items per task (the sizes lm-eval users know); the gate's min_n must fit the smallest task of a recipe.
ITEMS = {"humaneval_instruct": 164, "mbpp": 500, "mbpp_instruct": 500, "gsm8k": 1319, "gsm8k_cot_llama": 1319,
         "swde": 1111}
FAMILIES = {"code": {"humaneval_instruct", "mbpp", "mbpp_instruct"}, "math": {"gsm8k", "gsm8k_cot_llama"},
            "extraction": {"swde"}}
# The hub datasets those tasks load, as (id, config): served tiny, as the stand-in serves everything.
DATASETS = [("google-research-datasets/mbpp", "full"), ("openai/gsm8k", "main"),
            ("hazyresearch/based-swde-v2", "default")]
CHECK = r"""
import json, sys
from quant.validate import check_file
from core.recipe import RecipeError
out = {}
for path in sys.argv[1:]:
    try:
        recipe, findings = check_file(path, engine=False)
        out[path] = {"errors": [], "warnings": findings.warnings}
    except RecipeError as exc:
        out[path] = {"errors": str(exc).splitlines(), "warnings": []}
print(json.dumps(out))
"""


@pytest.mark.slow
def test_gpu_recipes_validate_against_the_real_models_shapes_and_tasks(tmp_path):
    paths = [str(REPO / "recipes" / f"{name}.yaml") for name in RECIPES]
    with HubStandin() as hub:
        for name, (model, gated) in RECIPES.items():
            hub.add_model(model, {"config.json": CONFIGS / (model.replace("/", "--") + ".json")}, gated=gated)
        for dataset, config in DATASETS:
            hub.add_dataset(dataset, tiny_dataset_files({"test": [{"text": "x"}]}, config=config))
        proc = subprocess.run([sys.executable, "-c", CHECK, *paths], cwd=REPO, capture_output=True, text=True,
                              env={**os.environ, **hub.env(tmp_path, token=GRANTED_TOKEN)}, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        models = {path.split("/resolve/")[0] for method, path in hub.requests if "/resolve/" in path
                  and not path.startswith("/datasets/")}
        fetched = {path.rsplit("/", 1)[1] for method, path in hub.requests if method == "GET"
                   and "/resolve/" in path and not path.startswith("/datasets/")}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for path in paths:
        assert out[path] == {"errors": [], "warnings": []}
    assert models == {"/" + model for model, _ in RECIPES.values()} and fetched == {"config.json"}


def test_gpu_recipes_cover_code_math_extraction_standard_schemes_and_an_80gb_gpu():
    for name in RECIPES:
        recipe = yaml.safe_load((REPO / "recipes" / f"{name}.yaml").read_text())
        tasks = [t if isinstance(t, str) else t["name"] for t in recipe["tasks"]]
        assert all(FAMILIES[family] & set(tasks) for family in FAMILIES), (name, tasks)
        schemes = {(v.get("scheme"), v.get("algorithm")) for v in recipe["variants"]}
        assert {("FP8_DYNAMIC", None), ("W8A8", "gptq"), ("W4A16", "gptq"), ("W4A16_ASYM", "awq")} <= schemes
        assert all("lm_head" in v.get("ignore", []) for v in recipe["variants"] if v.get("scheme"))
        assert any(len(v.get("ignore", [])) > 1 for v in recipe["variants"]), "a mixed variant"
        assert any(v.get("kv_cache_dtype") == "fp8" for v in recipe["variants"]), "an FP8 KV cache variant"
        assert recipe["perf"]["accelerator_memory_gib"] == 80
        assert recipe["gates"]["min_n"] <= min(ITEMS[t] for t in tasks)
