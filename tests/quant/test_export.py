"""`quant export` on a whole sweep made on the stand-in engine (tests/standin_engine.py) with a variant that
llmcompressor really quantized (W4A16, round-to-nearest: seconds, no calibration; the card of a calibrated
variant is tests/reports/test_model_card.py's): the folder holds the checkpoint's own files (copies, no
links), its manifest, the recipe and a card whose every number is the run's; what cannot be exported (a
failed variant, an unknown run or variant, a non-empty folder, a checkpoint no longer there) is one line and
exit 2; a disk that fills up mid-export leaves nothing that looks like a finished folder."""

from __future__ import annotations

import errno
import filecmp
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from core import exit_codes
from core.recipe import parse_recipe
from core.results import Results
from quant import export as export_module
from quant.cli import main
from quant.progress import Reporter
from quant.sweep import run_sweep
from tests.fixtures import edit_results
from tests.helpers import DEMO_MODEL, REPO, quant

pytestmark = pytest.mark.slow

ITEMS = 40
RECIPE = """\
name: export-demo
model: demo
engine: {{args: {{max_model_len: 512}}}}
variants:
  - {{name: bf16, baseline: true}}
  - {{name: w4a16-rtn, scheme: W4A16, algorithm: rtn, description: round-to-nearest}}
  - {{name: theirs-wrong20, checkpoint: {theirs}}}
  - {{name: broken, checkpoint: {broken}}}
tasks: [{{name: demo_math, data_files: {data}}}]
kl_items: 2
gates: {{rule: significant, max_drop: 0.05, min_n: 30}}
perf:
  workloads:
    - {{name: tiny, prompt_tokens: 16, output_tokens: 4, concurrency: [1, 2], requests_per_level: 4, warmup_requests: 1}}
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """The run: bf16, a W4A16 variant that scores as the baseline (pass), a ready-made checkpoint that loses half
    the items (regression) and one whose engine rejects every request (failed)."""
    root = tmp_path_factory.mktemp("export")
    mp = pytest.MonkeyPatch()
    engine = root / "standin-python"
    engine.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{REPO / "tests" / "standin_engine.py"}" "$@"\n')
    engine.chmod(0o755)
    mp.setenv("QUANT_ENGINE_PYTHON", str(engine))
    for name in ("theirs", "broken"):
        shutil.copytree(DEMO_MODEL, root / name)
        (root / name / "README.md").write_text(f"{name}\n")
    data = root / "items.jsonl"
    data.write_text("".join(json.dumps({"question": f"item {i}: what is 40 + 2?", "answer": "40+2=42\n#### 42"})
                            + "\n" for i in range(ITEMS)))
    text = RECIPE.format(theirs=root / "theirs", broken=root / "broken", data=data)
    (root / "export-demo.yaml").write_text(text)
    try:
        run_sweep(parse_recipe(text, str(root / "export-demo.yaml")), root / "run",
                  recipe_path=root / "export-demo.yaml", cache_dir=root / "cache", reporter=Reporter(quiet=True))
    finally:
        mp.undo()
    return root / "run"


def results_of(run: Path) -> Results:
    return Results.model_validate_json((run / "results.json").read_text())


def export(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["export", *map(str, argv)])
    out = capsys.readouterr()
    return code, out.out, out.err


def card_of(folder: Path) -> tuple[dict, str]:
    text = (folder / "README.md").read_text()
    _, header, body = text.split("---\n", 2)
    return yaml.safe_load(header), body


def table_rows(body: str, section: str) -> list[list[str]]:
    part = body.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in part.splitlines() if line.startswith("| ")]
    return rows[1:]   # the header row; the |---| line does not start with "| "


def numbers(cell: str) -> list[float]:
    return [float(x) for x in re.findall(r"[-+]?\d+\.\d+|[-+]?\d+", cell)]


def test_the_folder_holds_the_checkpoint_its_manifest_the_recipe_and_a_card(run, tmp_path, capsys):
    code, out, err = export(capsys, f"{run}:w4a16-rtn", tmp_path / "w4a16")
    assert code == 0, err
    record = results_of(run).variants["w4a16-rtn"]
    checkpoint, folder = Path(record.checkpoint), tmp_path / "w4a16"
    assert "/cache/checkpoints/" in str(checkpoint) and f"exported w4a16-rtn to {folder}" in out
    copied = sorted(p.relative_to(checkpoint).as_posix() for p in checkpoint.rglob("*") if p.is_file())
    assert "model.safetensors" in copied
    for name in copied:
        if name in ("README.md", "quant_manifest.json"):
            continue
        assert not (folder / name).is_symlink() and filecmp.cmp(checkpoint / name, folder / name, shallow=False)
    assert not any(p.is_symlink() for p in folder.rglob("*"))
    assert json.loads((folder / "quant_manifest.json").read_text()) == record.manifest
    recipe = yaml.safe_load((folder / "quant_recipe.yaml").read_text())
    assert recipe == results_of(run).recipe
    meta, body = card_of(folder)
    assert meta["license"] == "apache-2.0" and "base_model" not in meta   # the demo model is no hub model
    assert {"quant-suite", "quantized", "w4a16", "compressed-tensors"} <= set(meta["tags"])
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())   # no staging directory left


def test_the_cards_numbers_are_the_runs(run, tmp_path, capsys):
    """Read back from the card: what the variant is, each task's scores, recovery and paired test, the gate's
    verdict (as `quant gate` gives it) and every perf level, against results.json."""
    assert export(capsys, f"{run}:w4a16-rtn", tmp_path / "w")[0] == 0
    results = results_of(run)
    record, base = results.variants["w4a16-rtn"], results.baseline_record
    _, body = card_of(tmp_path / "w")
    facts = dict(table_rows(body, "What it is"))
    manifest = record.manifest
    assert facts["scheme"] == manifest["scheme_description"] and facts["algorithm"] == "rtn"
    assert facts["kept in 16-bit"] == ", ".join(manifest["ignore_expanded"]) == "lm_head"
    assert manifest.get("calibration") is None and facts["calibration"] == "none (a scheme that needs no data)"
    ((task, metric, n, acc, ref, delta, recovery, paired),) = table_rows(body, "Accuracy against the base model")
    mine, theirs = record.accuracy["demo_math"], base.accuracy["demo_math"]
    assert (task, metric, int(n)) == ("demo_math", mine.metric, mine.n) == ("demo_math", "exact_match", ITEMS)
    assert numbers(acc) == [round(mine.value, 3), *(round(x, 3) for x in mine.ci95)]
    assert numbers(ref) == [round(theirs.value, 3), *(round(x, 3) for x in theirs.ci95)]
    assert numbers(delta) == [round(mine.value - theirs.value, 3)]
    assert recovery == f"{mine.value / theirs.value:.1%}" == "100.0%"
    assert paired.startswith("Δ [") and "−0/+0 items" in paired and "exact McNemar" in paired
    code, gate_out = quant("gate", "--baseline", f"{run}:bf16", "--candidate", f"{run}:w4a16-rtn")
    assert code == 0 and "**PASS**: `quant gate` of `w4a16-rtn` against `bf16`." in body
    assert "Policy (baseline recipe" in body and "rule significant, max_drop 0.05, min_n 30" in body
    levels = table_rows(body, "Performance")
    points = record.perf["tiny"].points
    assert [row[0].rstrip(" †") for row in levels] == [f"concurrency {p.concurrency}" for p in points]
    for row, point in zip(levels, points):
        assert (int(row[1]), int(row[2])) == (point.n, point.errors)
        assert float(row[3]) == round(point.output_tokens_per_s, 1)
        assert numbers(row[5]) == [round(point.ttft_ms.p50, 1), round(point.ttft_ms.p99, 1)]
    engine = results.engine
    assert f"Measured with {engine.distribution} {engine.version} on {engine.device}" in body
    assert f"exported by quant-suite" in body


def test_a_regression_is_exported_and_its_card_says_so(run, tmp_path, capsys):
    code, out, _ = export(capsys, f"{run}:theirs-wrong20", tmp_path / "t")
    assert code == 0 and "gate: REGRESSION" in out
    _, body = card_of(tmp_path / "t")
    assert "**REGRESSION**" in body and "−20/+0 items" in body
    assert quant("gate", "--baseline", f"{run}:bf16", "--candidate", f"{run}:theirs-wrong20")[0] == 1


def test_the_baseline_gets_its_card_and_a_hub_model_is_not_copied(run, tmp_path, capsys):
    assert export(capsys, f"{run}:bf16", tmp_path / "base")[0] == 0
    _, body = card_of(tmp_path / "base")
    assert "is the run's baseline" in body and (tmp_path / "base" / "model.safetensors").is_file()
    hub_run = tmp_path / "hub-run"
    shutil.copytree(run, hub_run)
    edit_results(hub_run, lambda r: r.update(model="org/tiny-llama", recipe={**r["recipe"], "revision": "v2"}))
    code, _, err = export(capsys, f"{hub_run}:bf16", tmp_path / "hub-base")
    assert code == 0, err
    meta, body = card_of(tmp_path / "hub-base")
    assert sorted(p.name for p in (tmp_path / "hub-base").iterdir()) == \
           ["README.md", "quant_manifest.json", "quant_recipe.yaml"]
    assert meta["base_model"] == "org/tiny-llama" and "base_model_relation" not in meta
    assert "The weights are the hub model `org/tiny-llama`, not copied into this folder" in body
    assert "--model org/tiny-llama" in body and "--revision v2" in body
    code, _, err = export(capsys, f"{hub_run}:w4a16-rtn", tmp_path / "hub-q")
    meta, _ = card_of(tmp_path / "hub-q")
    assert code == 0 and meta["base_model"] == "org/tiny-llama" and meta["base_model_relation"] == "quantized"


def test_a_failed_variant_is_exported_only_when_allowed_and_its_card_says_so_first(run, tmp_path, capsys):
    code, _, err = export(capsys, f"{run}:broken", tmp_path / "b")
    assert code == exit_codes.BAD_INPUT and len(err.strip().splitlines()) == 1
    assert err.startswith("export error: ") and "broken is recorded failed" in err and "--allow-undeployable" in err
    assert not (tmp_path / "b").exists()
    code, out, _ = export(capsys, f"{run}:broken", tmp_path / "b", "--allow-undeployable")
    meta, body = card_of(tmp_path / "b")
    assert code == 0 and "not-deployable" in meta["tags"]
    assert body.lstrip("\n").splitlines()[0].startswith("> **NOT DEPLOYABLE**: variant broken is recorded failed")


@pytest.mark.parametrize("target, says", [("{run}:nope", "no variant 'nope' (have bf16, w4a16-rtn"),
                                          ("{run}", "name the variant to export as RUN:VARIANT"),
                                          ("{tmp}/no-run:bf16", "no results.json there")])
def test_an_unknown_run_or_variant_is_one_line(run, tmp_path, target, says):
    code, out = quant("export", target.format(run=run, tmp=tmp_path), str(tmp_path / "x"))
    assert code == exit_codes.BAD_INPUT and out.startswith("export error: ") and says in out
    assert len(out.strip().splitlines()) == 1 and not (tmp_path / "x").exists()


def test_a_non_empty_destination_needs_force(run, tmp_path, capsys):
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "keep.txt").write_text("mine")
    code, _, err = export(capsys, f"{run}:w4a16-rtn", dest)
    assert code == exit_codes.BAD_INPUT and "not empty; --force replaces it" in err
    assert (dest / "keep.txt").read_text() == "mine"
    code, _, err = export(capsys, f"{run}:w4a16-rtn", dest, "--force")   # --force replaces only an export
    assert code == exit_codes.BAD_INPUT and "not an earlier export" in err and (dest / "keep.txt").is_file()
    (dest / "keep.txt").unlink()
    assert export(capsys, f"{run}:w4a16-rtn", dest)[0] == 0
    (dest / "extra.txt").write_text("x")
    assert export(capsys, f"{run}:w4a16-rtn", dest, "--force")[0] == 0
    assert not (dest / "extra.txt").exists() and (dest / "README.md").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["dest"]   # the replaced folder is gone too


def test_force_never_replaces_the_run_its_cache_the_current_directory_or_a_repository(run, tmp_path, capsys,
                                                                                      monkeypatch):
    holder = tmp_path / "holder"
    shutil.copytree(run, holder / "run")
    (holder / "unrelated.txt").write_text("mine")
    checkpoint = Path(results_of(run).variants["w4a16-rtn"].checkpoint)
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "code.py").write_text("x")
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    cases = {".": "is the current directory", str(holder): "holds the run", str(holder / "run"): "is the run",
             str(holder / "run" / "variants"): "is inside the run", str(checkpoint.parents[2]): "is the stage cache",
             str(checkpoint.parents[3]): "holds the stage cache", str(repo): "version-controlled"}
    for dest, says in cases.items():
        code, _, err = export(capsys, f"{holder / 'run'}:w4a16-rtn", dest, "--force")
        assert code == exit_codes.BAD_INPUT and says in err and len(err.strip().splitlines()) == 1, dest
    assert (holder / "unrelated.txt").read_text() == "mine" and (holder / "run" / "results.json").is_file()
    assert checkpoint.is_dir() and (repo / "code.py").is_file()


def test_export_copies_a_checkpoint_never_what_a_link_or_a_crafted_record_points_at(run, tmp_path, capsys):
    moved, secret = tmp_path / "run", tmp_path / "id_rsa"
    shutil.copytree(run, moved)
    secret.write_text("PRIVATE KEY")
    checkpoint = tmp_path / "ckpt"
    shutil.copytree(results_of(run).variants["w4a16-rtn"].checkpoint, checkpoint)
    (checkpoint / "id_rsa").symlink_to(secret)
    edit_results(moved, lambda r: r["variants"]["w4a16-rtn"].update(checkpoint=str(checkpoint)))
    code, _, err = export(capsys, f"{moved}:w4a16-rtn", tmp_path / "x")
    assert code == exit_codes.BAD_INPUT and "a symbolic link leading outside the checkpoint" in err
    ssh = tmp_path / "dot-ssh"
    ssh.mkdir()
    (ssh / "id_rsa").write_text("PRIVATE KEY")
    edit_results(moved, lambda r: r["variants"]["w4a16-rtn"].update(checkpoint=str(ssh)))
    code, _, err = export(capsys, f"{moved}:w4a16-rtn", tmp_path / "x")
    assert code == exit_codes.BAD_INPUT and "is not a model folder" in err
    assert not (tmp_path / "x").exists()


def test_a_checkpoint_no_longer_in_the_cache_is_bad_input(run, tmp_path, capsys):
    moved = tmp_path / "run"
    shutil.copytree(run, moved)
    edit_results(moved, lambda r: r["variants"]["w4a16-rtn"].update(checkpoint=str(tmp_path / "gone" / "model")))
    code, _, err = export(capsys, f"{moved}:w4a16-rtn", tmp_path / "x")
    assert code == exit_codes.BAD_INPUT and "is not there (the stage cache was removed" in err


def test_a_disk_that_fills_mid_copy_leaves_no_folder_and_keeps_the_one_it_would_replace(run, tmp_path, capsys,
                                                                                     monkeypatch):
    """A fault injected on purpose: the copy of the weights fails with ENOSPC after the first files."""
    dest = tmp_path / "dest"
    assert export(capsys, f"{run}:bf16", dest)[0] == 0
    before = sorted(p.name for p in dest.iterdir())
    copies = []

    def fills_up(src, dst):
        if Path(src).name == "model.safetensors":
            Path(dst).write_bytes(Path(src).read_bytes()[:4096])   # half written, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device", str(dst))
        copies.append(src)
        return shutil.copyfile(src, dst)

    monkeypatch.setattr(export_module, "copy_file", fills_up)
    code, _, err = export(capsys, f"{run}:w4a16-rtn", dest, "--force")
    assert code == exit_codes.FAILED and len(err.strip().splitlines()) == 1 and copies
    assert err.startswith(f"export error: {dest}: No space left on device while exporting; nothing was left")
    assert sorted(p.name for p in dest.iterdir()) == before   # the earlier export, untouched
    assert [p.name for p in tmp_path.iterdir()] == ["dest"]   # no staging directory left behind


def _mount_tmpfs(path: Path, size: str) -> bool:
    path.mkdir()
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


def test_a_real_disk_that_fills_up_leaves_nothing_behind(run, tmp_path):
    """A 1 MiB tmpfs (needs root: skipped elsewhere) cannot hold the 2.3 MB checkpoint."""
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "1m"):
        pytest.skip("cannot mount a tmpfs here (not root)")
    try:
        code, out = quant("export", f"{run}:w4a16-rtn", str(disk / "w4a16"))
        assert code == exit_codes.FAILED and "No space left on device while exporting" in out, out
        assert len(out.strip().splitlines()) == 1 and list(disk.iterdir()) == []
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_choose_prints_the_export_command_and_it_works(run, tmp_path):
    code, out = quant("choose", str(run))
    assert code == 0, out
    line = next(line for line in out.splitlines() if line.strip().startswith("export"))
    command = line.split(": ", 1)[1]
    variant = command.split(":")[-1].split()[0]
    assert command == f"quant export {run}:{variant} exports/{variant}"
    code, printed = quant(*command.split()[1:-1], str(tmp_path / "chosen"))
    assert code == 0 and (tmp_path / "chosen" / "README.md").is_file(), printed
    html = (run / "report.html").read_text()
    assert f"/run:{variant} exports/{variant}</code>" in html and "export with a model card" in html
