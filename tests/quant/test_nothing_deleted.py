"""Nothing the user did not name is replaced: `quant sweep --out` onto a run of another recipe, and
`python -m quantize --out` onto a folder it did not write, are refused (one line, exit 2 / the quantizer's error
line) and leave what is there as it was. (`quant export`'s own checks are in test_export.py.)"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

from quant.cli import main as quant_main
from tests.helpers import DEMO_MODEL, REPO

RECIPE = """\
name: another-recipe
model: demo
engine: {args: {max_model_len: 512}}
variants:
  - {name: bf16, baseline: true}
tasks: [{name: demo_math, limit: 2}]
"""


def test_sweep_out_onto_another_recipes_run_is_refused(tmp_path, standin_engine, capsys):
    out = tmp_path / "run"
    shutil.copytree(REPO / "tests" / "data" / "demo_run", out)
    before = (out / "results.json").read_bytes()
    recipe = tmp_path / "another.yaml"
    recipe.write_text(RECIPE)
    code = quant_main(["sweep", str(recipe), "--out", str(out), "--cache-dir", str(tmp_path / "cache")])
    err = capsys.readouterr().err   # (the stand-in engine's warning that it lists no flags comes first)
    assert code == 2 and "Traceback" not in err
    name = json.loads(before)["recipe_name"]
    (line,) = [line for line in err.splitlines() if "holds a run" in line]
    assert f"holds a run of recipe {name!r}, not 'another-recipe'" in line and "--replace-run" in line
    assert (out / "results.json").read_bytes() == before and not standin_engine.exists()


def test_quantize_out_onto_a_folder_it_did_not_write_is_refused(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    proc = subprocess.run([sys.executable, "-m", "quantize", "--model", str(DEMO_MODEL), "--out", str(out),
                           "--variant-json", '{"name": "w", "scheme": "W4A16", "algorithm": "rtn"}'],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 1 and "QUANTIZE-ERROR: ValueError: --out" in proc.stderr
    assert "not empty and not a checkpoint this command wrote" in proc.stderr
    assert (out / "notes.txt").read_text() == "mine" and [p.name for p in out.iterdir()] == ["notes.txt"]
