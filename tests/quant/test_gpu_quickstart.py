"""docs/gpu.md's path, step by step, as a user on a GPU box runs it: a gated hub model with HF_TOKEN, `quant
validate`, `quant sweep` (the model fetched into the standard HF cache, hub task data, a quantized variant),
`quant gate` with a JUnit report, `quant choose`, and an offline re-run from the caches. The stand-in hub
(tests/hub_standin.py) stands in for huggingface.co and the stand-in engine for vLLM on the GPU; the real
huggingface_hub, datasets, llmcompressor and lm-eval code runs."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET

import pytest

from tests.helpers import DEMO_MODEL, REPO, quant
from tests.hub_standin import GRANTED_TOKEN, HubStandin, tiny_dataset_files

RECIPE = """\
name: quickstart
model: org/gated-coder
revision: main
engine: {args: {max_model_len: 512}}
variants:
  - {name: bf16, baseline: true}
  - {name: w8a8, scheme: W8A8, algorithm: rtn}
tasks:
  - {name: demo_math, limit: 12}
  - {name: gsm8k, num_fewshot: 0, limit: 6}    # lm-eval's gsm8k; its data from the hub (openai/gsm8k)
kl_items: 2
perf:
  workloads:
    - {name: tiny, prompt_tokens: 16, output_tokens: 4, concurrency: [1, 2], requests_per_level: 4, warmup_requests: 1}
gates: {max_drop: 0.05, min_n: 6}
"""


@pytest.mark.slow
def test_the_gpu_quickstart_end_to_end_on_standins(tmp_path, standin_engine):
    recipe = tmp_path / "quickstart.yaml"
    recipe.write_text(RECIPE)
    math = [json.loads(line) for line in (REPO / "evals/tasks/demo_math/test.jsonl").open()][:6]
    rows = [{"question": r["question"], "answer": r["answer"]} for r in math]
    run = tmp_path / "runs" / "quickstart"
    with HubStandin() as hub:
        hub.add_model("org/gated-coder", {p.name: p for p in DEMO_MODEL.iterdir()}, gated=True)
        hub.add_dataset("openai/gsm8k", tiny_dataset_files({"test": rows, "train": rows}, config="main"))
        online = {k: v for k, v in os.environ.items() if "OFFLINE" not in k} | hub.env(tmp_path, token=GRANTED_TOKEN)

        code, out = quant("validate", str(recipe), env=online, timeout=600)
        assert code == 0, out
        assert not list((tmp_path / "hf-home").rglob("*.safetensors"))      # validation downloads no weights
        code, out = quant("sweep", str(recipe), "--out", str(run), "--cache-dir", str(tmp_path / "cache"),
                          env=online, timeout=1200)
        assert code == 0, out
        assert hub.unanswered == []
    weights = list((tmp_path / "hf-home").rglob("models--org--gated-coder/snapshots/*/model.safetensors"))
    assert len(weights) == 1                                                  # fetched once, into the HF cache
    results = json.loads((run / "results.json").read_text())
    for name in ("bf16", "w8a8"):
        v = results["variants"][name]
        assert v["status"] == "ok" and v["served"], v.get("reason")
        assert v["accuracy"]["gsm8k"]["n"] == 6 and v["accuracy"]["demo_math"]["n"] == 12
    assert results["variants"]["w8a8"]["manifest"]["scheme"] == "W8A8"

    code, out = quant("gate", "--baseline", str(run), "--candidate", f"{run}:w8a8", "--junit",
                      str(tmp_path / "gate.xml"), timeout=300)
    assert code == 0 and "PASS" in out, out
    cases = ET.parse(tmp_path / "gate.xml").getroot().iter("testcase")
    assert {case.get("name").split(".")[0] for case in cases} == {"demo_math", "gsm8k"}
    code, out = quant("choose", str(run), "--task", "gsm8k", timeout=300)
    assert code == 0 and "--served-model-name" in out, out

    # the hub gone, offline: everything comes from the HF cache and the stage cache
    offline = online | {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}
    code, out = quant("sweep", str(recipe), "--out", str(run), "--cache-dir", str(tmp_path / "cache"),
                      env=offline, timeout=600)
    assert code == 0 and "quantizing" not in out and "starting vllm" not in out, out
