"""Sweeps recorded in SQLite; `quant history` and `quant compare`."""

import json
import os
import subprocess
import sys

from quant import history
from reports.compare_sides import compare_sides
from tests.fixtures import results, variant
from tests.helpers import REPO



def run_results(started: str, math: float) -> dict:
    return results({"bf16": variant({"math": math}), "w4": variant({"math": math - 0.1})}, recipe_name="demo",
                   recipe_hash="abcdef1234" + started[-2:], started=started, finished=started)


def test_record_list_and_compare(tmp_path, monkeypatch):
    monkeypatch.setenv("QUANT_HISTORY_DB", str(tmp_path / "h.sqlite"))
    first = history.record(run_results("2026-11-30T10:00:01", 0.9), tmp_path / "a", REPO / "recipes" / "demo.yaml")
    second = history.record(run_results("2026-11-30T11:00:02", 0.8), tmp_path / "b", tmp_path)
    listed = history.runs()
    assert [r["run_id"] for r in listed] == [second, first]
    assert listed[1]["git_commit"] and listed[0]["git_commit"] is None   # tmp_path is not a git checkout
    env = os.environ | {"QUANT_HISTORY_DB": str(tmp_path / "h.sqlite")}
    for args in (["--baseline", first, "--candidate", second], [first, second]):   # the old spelling still works
        out = subprocess.run([sys.executable, "-m", "quant.cli", "compare", *args], capture_output=True,
                             text=True, cwd=REPO, env=env)
        assert out.returncode == 0, out.stderr
        assert "-0.100" in out.stdout and "w4" in out.stdout
    out = subprocess.run([sys.executable, "-m", "quant.cli", "compare", "nope", second], capture_output=True,
                         text=True, cwd=REPO, env=env)
    assert out.returncode == 2 and "no run" in out.stderr


def test_compare_accepts_run_directories(tmp_path):
    for name, math in (("a", 0.5), ("b", 0.75)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(run_results("2026-11-30T10:00:00", math)))
    rows = compare_sides(*history.load_side(str(tmp_path / "a")), *history.load_side(str(tmp_path / "b")))
    assert {r["variant"]: round(r["delta"], 3) for r in rows} == {"bf16": 0.25, "w4": 0.25}


def test_compare_a_history_run_by_id_and_variant_with_its_paired_interval(tmp_path, monkeypatch):
    """A run id with :VARIANT names one variant; the run directory it was recorded from gives the per-item
    scores while it still holds that run."""
    from tests.fixtures import write_items

    monkeypatch.setenv("QUANT_HISTORY_DB", str(tmp_path / "h.sqlite"))
    data = run_results("2026-11-30T10:00:01", 0.9)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "results.json").write_text(json.dumps(data))
    write_items(tmp_path / "a", "bf16", "math", [1.0] * 90 + [0.0] * 10)
    write_items(tmp_path / "a", "w4", "math", [0.0] * 10 + [1.0] * 80 + [0.0] * 10)
    run_id = history.record(data, tmp_path / "a", tmp_path)
    [row] = compare_sides(*history.load_side(run_id), *history.load_side(f"{run_id}:w4"))
    assert row["variant"] == "bf16 -> w4" and row["n_paired"] == 100 and row["ci"][1] < 0
    (tmp_path / "a" / "results.json").write_text(json.dumps(run_results("2026-12-01T10:00:01", 0.9)))
    [row] = compare_sides(*history.load_side(run_id), *history.load_side(f"{run_id}:w4"))
    assert row["ci"] is None   # the directory holds a later run now: its items are not this run's


def test_the_runs_table_names_a_local_model_by_its_folder_and_marks_a_cut():
    from reports.history_output import MODEL_WIDTH, model_label

    assert model_label("/work/quant-suite/demo/model-outliers") == "model-outliers"
    assert model_label("./models/tinyllama.Q4_1.gguf") == "tinyllama.Q4_1.gguf"
    assert model_label("meta-llama/Llama-3.1-8B-Instruct") == "meta-llama/Llama-3.1-8B-Instruct"
    cut = model_label("HuggingFaceTB/SmolLM2-135M-Instruct")
    assert cut == "…ingFaceTB/SmolLM2-135M-Instruct" and len(cut) == MODEL_WIDTH
