"""A whole sweep in seconds, through its public entry point, against a stand-in engine (tests/standin_engine.py:
real processes and HTTP on 127.0.0.1, started by the sweep where it starts vLLM): results.json's structure,
KL against the baseline, a variant that fails recorded with its reason while the sweep goes on, and a second
run that reuses every finished stage without starting an engine."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from core.recipe import parse_recipe
from perf.engines.cpu_isa import host_cpu_isa
from quant.progress import Reporter
from quant.sweep import run_sweep

RECIPE = """\
name: standin
model: demo
engine: {{args: {{max_model_len: 512}}}}
variants:
  - {{name: bf16, baseline: true}}
  - {{name: theirs, checkpoint: {theirs}}}
  - {{name: broken, checkpoint: {broken}}}
tasks: [{{name: demo_math, limit: 4}}]
kl_items: 2
perf:
  workloads:
    - {{name: tiny, prompt_tokens: 16, output_tokens: 4, concurrency: [1, 2], requests_per_level: 4, warmup_requests: 1}}
"""


def sweep(tmp_path: Path, recipe_text: str) -> dict:
    recipe_path = tmp_path / "standin.yaml"
    recipe_path.write_text(recipe_text)
    recipe = parse_recipe(recipe_text, str(recipe_path))
    return run_sweep(recipe, tmp_path / "run", recipe_path=recipe_path, cache_dir=tmp_path / "cache",
                     reporter=Reporter(quiet=True))


def starts(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def test_a_sweep_on_a_standin_engine_records_caches_and_goes_on(tmp_path, standin_engine, demo_checkpoints):
    text = RECIPE.format(theirs=demo_checkpoints("theirs"), broken=demo_checkpoints("broken"))
    results = sweep(tmp_path, text)

    run = tmp_path / "run"
    assert json.loads((run / "results.json").read_text()) == results
    assert (results["recipe_name"], results["baseline"]) == ("standin", "bf16")
    assert results["engine"] == {"kind": "vllm", "distribution": "vllm", "version": "0.0.0+standin", "device": "cpu",
                                 "cpu_isa": host_cpu_isa(),
                                 "dtype": "float32" if host_cpu_isa() == "avx2" else "bfloat16"}
    variants = results["variants"]
    assert {name: v["status"] for name, v in variants.items()} == {"bf16": "ok", "theirs": "ok", "broken": "failed"}
    assert variants["broken"]["reason"].startswith("measurement:") and "HTTP 400" in variants["broken"]["reason"]
    errors_log = (run / "variants" / "broken" / "errors.log").read_text()   # the whole traceback, for a bug report
    assert errors_log.startswith("the measurement failed:\nTraceback (most recent call last)")
    assert "HTTP 400" in errors_log
    for name in ("bf16", "theirs"):
        accuracy = variants[name]["accuracy"]["demo_math"]
        assert accuracy["n"] == 4 and accuracy["backend"] == "served" and 0 <= accuracy["value"] <= 1
        (point_c1, point_c2) = variants[name]["perf"]["tiny"]["points"]
        assert (point_c1["concurrency"], point_c2["concurrency"]) == (1, 2)
        assert point_c1["n"] == point_c2["n"] == 4 and point_c1["errors"] == point_c2["errors"] == 0
        assert point_c1["output_tokens_per_s"] > 0
        assert (run / "variants" / name / "evals" / "demo_math.jsonl").read_text().count("\n") == 4
        assert (run / "variants" / name / "perf" / "tiny.jsonl").exists()
        assert variants[name]["memory"]["weights_bytes"] > 0
    # KL of each variant's next-token distributions from the baseline's, on the baseline's answers
    assert "kl" not in variants["bf16"]["accuracy"]["demo_math"]
    kl = variants["theirs"]["accuracy"]["demo_math"]["kl"]
    assert kl["value"] > 0 and kl["n"] == 2 and kl["top_k"] == 20
    assert {p.name for p in run.iterdir()} >= {"results.json", "pareto.md", "report.html"}
    assert starts(standin_engine) == ["bf16", "theirs", "broken"]
    # where the time went (benchmarks/sweep_time.py reads it): every stage this run did, in wall seconds; each
    # server after the first was started ahead, beside the previous variant's evals (quant/start_ahead.py)
    stages = variants["theirs"]["ran_on"]["stages"]
    assert set(stages) == {"quantize", "engine_start", "engine_start_ahead", "evals", "kl", "perf"}
    assert min(stages.values()) >= 0 and stages["engine_start_ahead"] > 0 and stages["perf"] > 0
    assert "engine_start_ahead" not in variants["bf16"]["ran_on"]["stages"]

    again = sweep(tmp_path, text)
    assert "engine_start" not in again["variants"]["theirs"]["ran_on"]["stages"]   # nothing started: all cached
    assert starts(standin_engine) == ["bf16", "theirs", "broken", "broken"]   # only the failed one is redone
    for name in ("bf16", "theirs"):
        assert {k: again["variants"][name][k] for k in ("status", "accuracy", "perf")} == \
               {k: variants[name][k] for k in ("status", "accuracy", "perf")}
    assert again["variants"]["broken"]["status"] == "failed"


def test_a_sweep_published_to_a_url_is_resumed_by_another_node_from_the_shared_cache(
        tmp_path, standin_engine, demo_checkpoints, monkeypatch):
    """Run directory and stage cache at fsspec URLs (file:/// here, as s3:// or gs:// would be): the run is
    published there, and a node with an empty mirror re-runs the recipe from the shared cache alone."""
    from core.remote import locate
    from quant.cli import main

    text = "".join(line for line in RECIPE.format(theirs=demo_checkpoints("theirs"), broken="-").splitlines(True)
                   if "broken" not in line)
    recipe_path = tmp_path / "standin.yaml"
    recipe_path.write_text(text)
    run_url, cache_url = (tmp_path / "bucket" / "runs" / "x").as_uri(), (tmp_path / "bucket" / "cache").as_uri()
    monkeypatch.setenv("QUANT_MIRROR_DIR", str(tmp_path / "node-a"))
    first = run_sweep(parse_recipe(text, str(recipe_path)), run_url, recipe_path=recipe_path, cache_dir=cache_url,
                      reporter=Reporter(quiet=True))

    published = tmp_path / "bucket" / "runs" / "x"
    assert json.loads((published / "results.json").read_text()) == first
    assert {p.name for p in published.iterdir()} >= {"results.json", "pareto.md", "report.html", "variants"}
    assert (published / "variants" / "theirs" / "evals" / "demo_math.jsonl").read_text().count("\n") == 4
    assert {p.name for p in (tmp_path / "bucket" / "cache").iterdir()} >= {"evals", "kl", "perf"}
    assert starts(standin_engine) == ["bf16", "theirs"]

    monkeypatch.setenv("QUANT_MIRROR_DIR", str(tmp_path / "node-b"))   # another node: nothing local yet
    again = run_sweep(parse_recipe(text, str(recipe_path)), run_url, recipe_path=recipe_path, cache_dir=cache_url,
                      reporter=Reporter(quiet=True))
    assert starts(standin_engine) == ["bf16", "theirs"]   # every stage came from the shared cache
    assert locate(run_url, "runs").local.is_relative_to(tmp_path / "node-b")
    for name in ("bf16", "theirs"):
        assert {k: again["variants"][name][k] for k in ("status", "accuracy", "perf")} == \
               {k: first["variants"][name][k] for k in ("status", "accuracy", "perf")}

    here = locate(run_url, "runs").local
    monkeypatch.setenv("QUANT_MIRROR_DIR", str(tmp_path / "ci-runner"))   # a CI job gates on the published run
    from_url = main(["gate", "--baseline", f"{run_url}:bf16", "--candidate", f"{run_url}:theirs"])
    assert (tmp_path / "ci-runner" / "runs").is_dir()
    assert from_url == main(["gate", "--baseline", f"{here}:bf16", "--candidate", f"{here}:theirs"])

    (published / "pareto.md").unlink()   # re-rendered from the URL, and published back
    assert main(["report", run_url]) == 0 and (published / "pareto.md").read_text().startswith("#")


DYING = """\
name: dying
model: demo
engine: {{args: {{max_model_len: 512}}}}
variants:
  - {{name: bf16, baseline: true}}
  - {{name: dies-once, checkpoint: {once}}}
  - {{name: dies-always, checkpoint: {always}}}
tasks: [{{name: demo_math, limit: 4}}]
perf:
  workloads:
    - {{name: tiny, prompt_tokens: 16, output_tokens: 4, concurrency: [1], requests_per_level: 2, warmup_requests: 0}}
"""


@pytest.mark.slow
def test_a_server_dying_mid_eval_is_restarted_once_else_recorded_failed_with_its_death(
        tmp_path, standin_engine, demo_checkpoints):
    import psutil

    text = DYING.format(once=demo_checkpoints("once"), always=demo_checkpoints("always"))
    variants = sweep(tmp_path, text)["variants"]

    # (dies-always's first server is started ahead, during dies-once's evals: before dies-once's restart)
    assert sorted(starts(standin_engine)) == ["bf16", "dies-always", "dies-always", "dies-once", "dies-once"]
    assert {name: v["status"] for name, v in variants.items()} == {"bf16": "ok", "dies-once": "ok",
                                                                   "dies-always": "failed"}
    died = "the engine died while serving: VLLM::EngineCor (pid "
    (death,) = variants["dies-once"]["engine_deaths"]
    assert death.startswith(died) and ") was killed by signal 9; last lines of server.log: " in death, death
    assert variants["dies-once"]["accuracy"]["demo_math"]["n"] == 4 and variants["dies-once"]["perf"]["tiny"]
    reason = variants["dies-always"]["reason"]
    assert reason.startswith(died) and reason.endswith("(after one restart)"), reason
    assert "stand-in engine serving" in reason and len(variants["dies-always"]["engine_deaths"]) == 2
    cores = [int(pid) for pid in Path(f"{standin_engine}.cores").read_text().split()]
    assert len(cores) == 4 and not [pid for pid in cores if psutil.pid_exists(pid)
                                    and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]


AHEAD = """\
name: ahead
model: demo
engine: {{args: {{max_model_len: 512}}}}
execution: {{quantize_ahead: {ahead}}}
variants:
  - {{name: bf16, baseline: true}}
  - {{name: w4a16-rtn, scheme: W4A16, algorithm: rtn, ignore: [lm_head]}}
tasks: [{{name: demo_math, limit: 4}}]
kl_items: 0
"""


@pytest.mark.slow
def test_the_next_variants_are_quantized_while_one_is_measured(tmp_path, standin_engine, monkeypatch):
    """Quantized ahead (the engine runs on the CPU): the checkpoint is built in the background and recorded as
    such; the same recipe without it builds the same checkpoint in the variant's turn. (Several builds, one
    after another in the sweep's order: tests/quant/test_quantize_ahead.py.)"""
    # at the sweep's own priority: at nice 19, beside the other test workers, the build gets next to no CPU
    # (that it yields is tests/perf/test_process_priority.py's and tests/quant/test_quantize_ahead.py's to show)
    monkeypatch.setattr("quant.ahead.NICE", os.getpriority(os.PRIO_PROCESS, 0))
    for where in ("ahead", "in-turn"):
        (tmp_path / where).mkdir()
    ahead = sweep(tmp_path / "ahead", AHEAD.format(ahead="null"))["variants"]
    in_turn = sweep(tmp_path / "in-turn", AHEAD.format(ahead="false"))["variants"]

    name = "w4a16-rtn"
    assert ahead[name]["status"] == in_turn[name]["status"] == "ok"
    weights = [sorted(Path(v[name]["checkpoint"]).glob("*.safetensors")) for v in (ahead, in_turn)]
    assert [p.read_bytes() for p in weights[0]] == [p.read_bytes() for p in weights[1]]
    assert ahead[name]["ran_on"]["stages"]["quantize_ahead"] > 0
    assert "quantize_ahead" not in in_turn[name]["ran_on"]["stages"]
    assert ahead[name]["accuracy"]["demo_math"]["n"] == 4
    assert "quantize_ahead" not in ahead["bf16"]["ran_on"]["stages"]


REFUSED = """\
name: refused
model: demo
engine: {{args: {{max_model_len: 512}}}}
variants:
  - {{name: bf16, baseline: true}}
  - {{name: refused, checkpoint: {refused}}}
tasks: [{{name: demo_math, limit: 4}}]
kl_items: 0
"""


def test_a_refusal_met_by_a_server_started_ahead_is_recorded_without_a_second_start(
        tmp_path, standin_engine, demo_checkpoints):
    text = REFUSED.format(refused=demo_checkpoints("refused"))
    variants = sweep(tmp_path, text)["variants"]
    assert starts(standin_engine) == ["bf16", "refused"]   # started ahead, beside bf16's evals; never again
    refused = variants["refused"]
    assert refused["status"] == "unsupported" and "stand-in refusal" in refused["reason"], refused["reason"]
    assert refused["accuracy"]["demo_math"]["backend"] == "inprocess"
    sweep(tmp_path, text)
    assert starts(standin_engine) == ["bf16", "refused"]   # the refusal is cached



def _cli_sweep(tmp_path: Path, text: str, capsys, *flags: str) -> tuple[int, str]:
    from quant.cli import main

    recipe_path = tmp_path / "r.yaml"
    recipe_path.write_text(text)
    code = main(["sweep", str(recipe_path), "--out", str(tmp_path / "run"), "--cache-dir", str(tmp_path / "cache"),
                 "--quiet", *flags])
    return code, capsys.readouterr().err


def test_an_engine_that_refuses_the_recipes_arguments_ends_the_sweep_with_exit_2(
        tmp_path, standin_engine, demo_checkpoints, capsys, monkeypatch):
    """Its own parser refuses a value (as vLLM's refuses `--max-model-len abc`): not the checkpoint's "unsupported"
    but the recipe's error, with the engine's message; no later variant is measured."""
    monkeypatch.setenv("QUANT_HISTORY_DB", str(tmp_path / "h.sqlite"))
    text = (f"name: badflag\nmodel: demo\nengine: {{args: {{max_model_len: 512}}}}\nvariants:\n"
            f"  - {{name: bf16, baseline: true}}\n  - {{name: badflag, checkpoint: {demo_checkpoints('badflag')}}}\n"
            f"  - {{name: after, checkpoint: {demo_checkpoints('after')}}}\n"
            f"tasks: [{{name: demo_math, limit: 2}}]\nkl_items: 0\nperf: {{workloads: []}}\n")
    code, err = _cli_sweep(tmp_path, text, capsys)
    assert code == 2, err
    assert "Traceback" not in err and [ln for ln in err.splitlines() if "error" in ln.lower()] == [
        ln for ln in err.splitlines() if ln.startswith("sweep error: ")], err
    assert ("sweep error: variant badflag: the engine refused to start with the recipe's engine arguments or "
            "environment: api_server.py: error: argument --max-model-len: invalid human_readable_int_or_auto "
            "value: 'x' (log: ") in err, err
    assert starts(standin_engine) == ["bf16", "badflag"]   # the variant after it is not measured
    recorded = json.loads((tmp_path / "run" / "results.json").read_text())["variants"]["badflag"]
    assert recorded["status"] == "failed" and recorded["engine_refused_recipe"] is True


@pytest.mark.parametrize("baseline, status, said", [
    ("refused-base", "unsupported", "the baseline refused-base could not be served"),
    ("crashes", "failed", "the baseline crashes failed")])
def test_a_baseline_that_cannot_be_served_does_not_exit_0(tmp_path, standin_engine, demo_checkpoints, capsys,
                                                          monkeypatch, baseline, status, said):
    """The engine refuses the baseline's checkpoint (recorded unsupported, scored in-process), or does not start for
    a reason that blames neither the recipe nor the checkpoint (failed, not "unsupported"): the gate and choose
    have no reference, and --allow-failed does not excuse it. With the baseline alone, nothing could be served."""
    monkeypatch.setenv("QUANT_HISTORY_DB", str(tmp_path / "h.sqlite"))
    text = (f"name: nobase\nmodel: demo\nengine: {{args: {{max_model_len: 512}}}}\nvariants:\n"
            f"  - {{name: {baseline}, baseline: true}}\n  - {{name: theirs, checkpoint: {demo_checkpoints('theirs')}}}\n"
            f"tasks: [{{name: demo_math, limit: 2}}]\nkl_items: 0\nperf: {{workloads: []}}\n")
    code, err = _cli_sweep(tmp_path, text, capsys, "--allow-failed")
    assert code == 1, err
    counts = f"1 ok, {int(status == 'unsupported')} unsupported, {int(status == 'failed')} failed"
    assert f"sweep: {counts}; {said}: `quant gate` and `quant choose` have nothing to stand on" in err, err
    assert json.loads((tmp_path / "run" / "results.json").read_text())["variants"][baseline]["status"] == status
    code, err = _cli_sweep(tmp_path, text, capsys, "--only", baseline)
    assert code == 1 and "nothing could be served" in err, err


def test_a_sweep_with_only_says_how_many_of_the_recipes_variants_it_runs(tmp_path, standin_engine,
                                                                           demo_checkpoints, capsys, monkeypatch):
    monkeypatch.setenv("QUANT_HISTORY_DB", str(tmp_path / "h.sqlite"))
    from quant.cli import main

    recipe_path = tmp_path / "r.yaml"
    recipe_path.write_text(f"name: some\nmodel: demo\nengine: {{args: {{max_model_len: 512}}}}\nvariants:\n"
                           f"  - {{name: bf16, baseline: true}}\n"
                           f"  - {{name: theirs, checkpoint: {demo_checkpoints('theirs')}}}\n"
                           f"tasks: [{{name: demo_math, limit: 2}}]\nkl_items: 0\nperf: {{workloads: []}}\n")
    main(["sweep", str(recipe_path), "--out", str(tmp_path / "run"), "--cache-dir", str(tmp_path / "cache"),
          "--only", "theirs"])
    header = " ".join(capsys.readouterr().err.split())
    assert "· 1 of 2 variants · tasks demo_math" in header, header
