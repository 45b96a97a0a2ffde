"""What a command imports before it can answer: a malformed recipe is reported, a known recipe validated and an
unchanged sweep re-run without torch, transformers, lm-eval or vLLM (seconds each to import). Each runs in a
fresh interpreter, which then names the heavy modules it ended up with."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from core.recipe import parse_recipe
from quant.progress import Reporter
from quant.sweep import run_sweep
from tests.helpers import REPO

HEAVY = ("torch", "transformers", "lm_eval", "vllm", "llmcompressor", "compressed_tensors", "datasets",
         "matplotlib", "scipy", "numpy")

DRIVER = """
import json, sys
from quant.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "heavy": sorted(m for m in %r if m in sys.modules)}), file=sys.stderr)
""" % (HEAVY,)

CHECK_DRIVER = """
import json, sys
from quant.validate import check_file
check_file(sys.argv[1])
print(json.dumps({"heavy": sorted(m for m in %r if m in sys.modules)}))
""" % (HEAVY,)


def quant(*args: str) -> tuple[int, list[str], str]:
    """(exit code, heavy modules imported, stderr) of `quant ARGS` in a fresh interpreter."""
    proc = subprocess.run([sys.executable, "-c", DRIVER, *args], capture_output=True, text=True, cwd=REPO,
                          timeout=600)
    verdict = json.loads(proc.stderr.strip().splitlines()[-1])
    return verdict["code"], verdict["heavy"], proc.stderr


def test_a_malformed_recipe_is_reported_before_any_heavy_import(tmp_path):
    syntax = tmp_path / "syntax.yaml"
    syntax.write_text("name: bad\nmodel: demo\nvariants:\n  - name: x\n    scheme: [W4\n")
    schema = tmp_path / "schema.yaml"
    schema.write_text("name: bad\nmodel: demo\nvariants:\n  - {name: bf16, baseline: true, bogus: 1}\n")
    for recipe, problem in ((syntax, "not valid YAML"), (schema, "variants.0.bogus: unknown field")):
        code, heavy, err = quant("sweep", str(recipe), "--out", str(tmp_path / "run"))
        assert code == 2 and problem in err and "Traceback" not in err, err
        assert heavy == [], f"{recipe.name}: imported {heavy}"


def test_a_recipe_checked_before_is_checked_again_without_heavy_imports(tmp_path):
    """Scheme names, group sizes against the model's shapes and task names: the second time, from what the
    first check found (remembered by content), with no model built and no lm-eval task index."""
    recipe = REPO / "recipes" / "demo.yaml"

    def check() -> list[str]:
        proc = subprocess.run([sys.executable, "-c", CHECK_DRIVER, str(recipe)], capture_output=True, text=True,
                              cwd=REPO, timeout=900)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])["heavy"]

    check()
    assert check() == []


RECIPE = """\
name: startup
model: demo
engine: {{args: {{max_model_len: 512}}}}
variants:
  - {{name: bf16, baseline: true}}
  - {{name: theirs, checkpoint: {theirs}}}
tasks: [{{name: demo_math, limit: 4}}]
kl_items: 2
perf:
  workloads:
    - {{name: tiny, prompt_tokens: 16, output_tokens: 4, concurrency: [1], requests_per_level: 2, warmup_requests: 0}}
"""


def test_an_unchanged_rerun_imports_nothing_heavy(tmp_path, standin_engine, demo_checkpoints, monkeypatch):
    # a history of its own: earlier sweeps of the demo model by other tests would add a perf-over-time plot
    monkeypatch.setenv("QUANT_HISTORY_DB", str(tmp_path / "history.sqlite"))
    recipe_path = tmp_path / "startup.yaml"
    recipe_path.write_text(RECIPE.format(theirs=demo_checkpoints("theirs")))
    run, cache = tmp_path / "run", tmp_path / "cache"
    first = run_sweep(parse_recipe(recipe_path.read_text(), str(recipe_path)), run, recipe_path=recipe_path,
                      cache_dir=cache, reporter=Reporter(quiet=True))
    assert {v["status"] for v in first["variants"].values()} == {"ok"}
    reports = {p: p.stat().st_mtime_ns for p in (run / "pareto.md", run / "pareto.png", run / "report.html")}

    code, heavy, err = quant("sweep", str(recipe_path), "--out", str(run), "--cache-dir", str(cache))
    assert code == 0, err[-3000:]
    assert heavy == [], f"an unchanged re-run imported {heavy}"
    assert standin_engine.read_text().split() == ["bf16", "theirs"]   # and started no engine
    again = json.loads((run / "results.json").read_text())
    assert {n: v["accuracy"] for n, v in again["variants"].items()} == \
           {n: v["accuracy"] for n, v in first["variants"].items()}
    assert {p: p.stat().st_mtime_ns for p in reports} == reports   # reports of unchanged results: not redrawn
