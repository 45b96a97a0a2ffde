"""Hub models and task data through the real huggingface_hub and datasets clients, against the stand-in hub
(tests/hub_standin.py): fetched once into the standard cache, honouring HF_HUB_OFFLINE and HF_TOKEN, and every
failure one clear line found before any download."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from tests.helpers import DEMO_MODEL, REPO, quant
from tests.hub_standin import GRANTED_TOKEN, NOT_GRANTED_TOKEN, HubStandin, tiny_dataset_files

# Each case: (repo id, revision, HF_TOKEN); prints {case: the directory or the error's one line}.
CONFIG_CASES = r"""
import json, os, sys
from quant.models import ModelNotFound, model_config_dir
out = {}
for repo, revision, token in json.loads(sys.argv[1]):
    os.environ.pop("HF_TOKEN", None)
    if token:
        os.environ["HF_TOKEN"] = token
    try:
        out[f"{repo}@{revision}:{token}"] = sorted(os.listdir(model_config_dir(repo, revision=revision)))
    except ModelNotFound as exc:
        out[f"{repo}@{revision}:{token}"] = str(exc)
print(json.dumps(out))
"""
RESOLVE = r"""
import json, sys
from quant.models import ModelNotFound, resolve_model
lines, out = [], {}
for repo, revision in json.loads(sys.argv[1]):
    try:
        out[f"{repo}@{revision}"] = str(resolve_model(repo, revision=revision, log=lines.append))
    except ModelNotFound as exc:
        out[f"{repo}@{revision}"] = str(exc)
print(json.dumps({"paths": out, "log": lines}))
"""
DATASETS = r"""
import json, sys
from core.hub import dataset_problem
print(json.dumps([dataset_problem(*case) for case in json.loads(sys.argv[1])]))
"""


def run(code: str, arg, env: dict) -> dict:
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(arg)], env={**os.environ, **env}, cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def demo_files(config_extra: dict | None = None) -> dict:
    files = {p.name: p for p in DEMO_MODEL.iterdir()}
    if config_extra:
        files["config.json"] = json.dumps(json.loads((DEMO_MODEL / "config.json").read_text()) | config_extra)
    return files


def test_a_hub_models_problems_are_one_line_each_from_its_config_alone(tmp_path):
    with HubStandin() as hub:
        hub.add_model("org/tiny", demo_files())
        hub.add_model("org/gated", demo_files(), gated=True)
        hub.add_model("org/weightless", {"README.md": b"no config"})
        cases = [("org/tiny", None, None), ("org/nope", None, None), ("org/gated", None, None),
                 ("org/gated", None, NOT_GRANTED_TOKEN), ("org/gated", None, GRANTED_TOKEN),
                 ("org/tiny", "v9", None), ("org/weightless", None, None), ("org/private", None, "hf_not_a_token")]
        out = run(CONFIG_CASES, cases, hub.env(tmp_path))
        fetched = [path for method, path in hub.requests if method == "GET"]
    small = sorted(p.name for p in DEMO_MODEL.iterdir() if p.suffix == ".json")   # config, tokenizer: no weights
    assert out["org/tiny@None:None"] == small and out[f"org/gated@None:{GRANTED_TOKEN}"] == small
    assert fetched[:1] == ["/org/tiny/resolve/main/config.json"]   # first: a problem shows before anything else
    assert not any(path.endswith(".safetensors") for path in fetched)
    assert out["org/nope@None:None"].startswith("model org/nope: no such model on the hub (http://127.0.0.1:")
    assert out["org/gated@None:None"] == ("model org/gated is gated: set HF_TOKEN to a token of an account that "
                                          "was granted access")
    assert out[f"org/gated@None:{NOT_GRANTED_TOKEN}"].startswith(
        "model org/gated is gated and the token in HF_TOKEN has not been granted access")
    assert out["org/tiny@v9:None"] == "model org/tiny@v9: the hub has no revision 'v9' of org/tiny (a branch, tag or commit)"
    assert out["org/weightless@None:None"] == "model org/weightless has no config.json: not a transformers model repo"
    assert out["org/private@None:hf_not_a_token"].startswith(
        "model org/private: the hub rejected the token in HF_TOKEN (invalid credentials)")
    assert all("\n" not in message for message in out.values() if isinstance(message, str))


def test_a_hub_model_is_fetched_once_into_the_standard_cache_then_read_offline(tmp_path):
    with HubStandin() as hub:
        hub.add_model("org/tiny", demo_files() | {"original/consolidated.pth": b"x" * 100})
        hub.add_model("org/tiny", demo_files({"revision_marker": "v1"}), revision="v1")
        online = run(RESOLVE, [("org/tiny", None), ("org/tiny", "v1")], hub.env(tmp_path))
        asked = len(hub.requests)
        offline = run(RESOLVE, [("org/tiny", None), ("org/tiny", "v1"), ("org/uncached", None)],
                      hub.env(tmp_path) | {"HF_HUB_OFFLINE": "1"})
        assert len(hub.requests) == asked   # offline: not one request
    main, v1 = online["paths"]["org/tiny@None"], online["paths"]["org/tiny@v1"]
    assert main.startswith(str(tmp_path / "hf-home/hub/models--org--tiny/snapshots/")) and main != v1
    assert sorted(os.listdir(main)) == sorted(p.name for p in DEMO_MODEL.iterdir())   # original/*.pth: not fetched
    assert json.loads(open(os.path.join(v1, "config.json")).read())["revision_marker"] == "v1"
    assert any("fetching from http://127.0.0.1:" in line for line in online["log"])
    assert offline["paths"]["org/tiny@None"] == main and offline["paths"]["org/tiny@v1"] == v1
    assert offline["paths"]["org/uncached@None"] == (
        "model org/uncached is not in the local Hugging Face cache and HF_HUB_OFFLINE=1 forbids fetching it: "
        "unset HF_HUB_OFFLINE to fetch it once")


@pytest.mark.slow
def test_an_unreachable_hub_is_one_line(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    env = {"HF_ENDPOINT": closed, "HF_HOME": str(tmp_path), "HF_HUB_OFFLINE": "0"}
    out = run(CONFIG_CASES, [("org/tiny", None, None)], env)
    assert out["org/tiny@None:None"] == (f"model org/tiny: the hub at {closed} cannot be reached (ConnectError) "
                                         "and it is not in the local cache; check the network or HF_ENDPOINT")


def test_hub_task_data_is_resolved_as_datasets_resolves_it(tmp_path):
    rows = [{"task_id": 1, "text": "add", "code": "def f(a, b): return a + b", "test_list": ["assert f(1, 2) == 3"]}]
    with HubStandin() as hub:
        hub.add_dataset("google-research-datasets/mbpp", tiny_dataset_files({"test": rows}, config="full"))
        hub.add_dataset("org/gated-data", tiny_dataset_files({"test": rows}), gated=True)
        out = run(DATASETS, [("google-research-datasets/mbpp", "full", None), ("openai/gsm8k", "main", None),
                             ("google-research-datasets/mbpp", "full", "v2"), ("org/gated-data", None, None),
                             ("google-research-datasets/mbpp", "sanitized", None)],
                  hub.env(tmp_path))
        assert not any(path.endswith(".jsonl") for _, path in hub.requests)   # resolved, no data downloaded
    assert out[0] is None
    assert out[1].startswith("dataset openai/gsm8k: no such dataset on the hub")
    assert out[2] == ("dataset google-research-datasets/mbpp@v2: the hub has no revision 'v2' of "
                      "google-research-datasets/mbpp (a branch, tag or commit)")
    assert out[3] == "dataset org/gated-data is gated: set HF_TOKEN to a token of an account that was granted access"
    assert out[4].startswith("dataset google-research-datasets/mbpp has no config 'sanitized'")


def test_which_tasks_load_hub_data():
    from core.recipe import Task
    from evals.registry import hub_dataset

    assert hub_dataset(Task(name="gsm8k")) == ("openai/gsm8k", "main", None)
    assert hub_dataset(Task(name="mbpp")) == ("google-research-datasets/mbpp", "full", None)
    assert hub_dataset(Task(name="humaneval")) is None                     # shipped with its data
    assert hub_dataset(Task(name="gsm8k", data_files="evals/tasks/demo_math/test.jsonl", num_fewshot=0)) is None


def test_quant_is_online_by_default_and_a_gated_model_without_token_stops_it_before_any_work(tmp_path):
    recipe = tmp_path / "gated.yaml"
    recipe.write_text("name: gated\nmodel: org/gated\nrevision: main\nvariants:\n  - {name: bf16, baseline: true}\n"
                      "tasks: [demo_math]\n")
    with HubStandin() as hub:
        hub.add_model("org/gated", demo_files(), gated=True)
        # Neither offline variable set: `quant` reaches the hub, as huggingface_hub does by default.
        env = {k: v for k, v in (os.environ | hub.env(tmp_path)).items() if k != "HF_TOKEN" and "OFFLINE" not in k}
        code, output = quant("sweep", str(recipe), "--out", str(tmp_path / "run"), env=env, timeout=600)
    assert code == 2, output
    assert output.strip().splitlines()[-1] == (f"sweep error: {recipe}:2: model: model org/gated@main is gated: "
                                               "set HF_TOKEN to a token of an account that was granted access")
    assert not (tmp_path / "run").exists()
