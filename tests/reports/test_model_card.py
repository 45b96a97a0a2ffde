"""The model card rendered from a recorded run (tests/data/demo_results.json, a `quant sweep recipes/demo.yaml`):
what a calibrated GPTQ variant is, its scores against the baseline and every perf level, read back from the
card and checked against results.json; the hub's metadata header; a card that cannot be deployed says so
first."""

from __future__ import annotations

import re

import yaml

from core.results import Results
from reports.model_card import NOT_DEPLOYABLE, CardFolder, render_card
from tests.helpers import REPO

RECORDED = Results.model_validate_json((REPO / "tests/data/demo_results.json").read_text())


def card(name: str = "w4a16-gptq", **folder) -> tuple[dict, str]:
    text = render_card(RECORDED, name, CardFolder(name=name, suite_version="quant-suite 9.9", **folder), None, None)
    assert text.startswith("---\n")
    _, header, body = text.split("---\n", 2)
    return yaml.safe_load(header), body


def rows(body: str, section: str) -> list[list[str]]:
    part = body.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return [[c.strip() for c in line.strip("|").split("|")] for line in part.splitlines() if line.startswith("| ")][1:]


def numbers(cell: str) -> list[float]:
    return [float(x) for x in re.findall(r"[-+]?\d+\.\d+|[-+]?\d+", cell)]


def test_what_a_calibrated_variant_is_comes_from_its_manifest():
    meta, body = card(license="apache-2.0")
    manifest = RECORDED.variants["w4a16-gptq"].manifest
    facts = dict(rows(body, "What it is"))
    assert facts["scheme"] == manifest["scheme_description"] and facts["algorithm"] == "gptq"
    assert facts["kept in 16-bit"] == "lm_head" and facts["format"] == "pack-quantized"
    assert facts["calibration"] == "demo: 128 samples of at most 256 tokens, seed 0"
    assert facts["calibration texts sha256"] == manifest["calibration"]["texts_sha256"]
    assert "llmcompressor 0.14.0.1" in facts["quantized with"]
    assert meta == {"license": "apache-2.0", "tags": ["quant-suite", "quantized", "pack-quantized", "w4a16",
                                                     "compressed-tensors"], "pipeline_tag": "text-generation"}
    assert "exported by quant-suite 9.9" in body


def test_every_task_and_perf_level_is_the_runs():
    _, body = card()
    record, base = RECORDED.variants["w4a16-gptq"], RECORDED.baseline_record
    accuracy = rows(body, "Accuracy against the base model")
    assert [r[0] for r in accuracy] == RECORDED.tasks()
    for task, metric, n, acc, ref, delta, recovery, paired in accuracy:
        mine, theirs = record.accuracy[task], base.accuracy[task]
        assert (metric, int(n)) == (mine.metric, mine.n)
        assert numbers(acc) == [round(mine.value, 3), *(round(x, 3) for x in mine.ci95)]
        assert numbers(ref) == [round(theirs.value, 3), *(round(x, 3) for x in theirs.ci95)]
        assert float(delta) == round(mine.value - theirs.value, 3)
        assert recovery == f"{mine.value / theirs.value:.1%}"
        assert paired == "- (no per-item files)"   # the recorded run has no per-item files beside it
    levels = [r for r in rows(body, "Performance") if r[0] != "level"]   # one table per workload
    points = [p for w in record.perf.values() for p in w.points]
    assert len(levels) == len(points) == 4
    for row, point in zip(levels, points):
        assert float(row[3]) == round(point.output_tokens_per_s, 1)
        assert numbers(row[6]) == [round(point.tpot_ms.p50, 2), round(point.tpot_ms.p99, 2)]


def test_the_serve_command_names_the_folder_and_the_hub_repo_it_is_pushed_to():
    _, body = card(push_repo="org/demo-w4a16")
    assert "--model w4a16-gptq --served-model-name w4a16-gptq" in body
    assert "--model org/demo-w4a16 --served-model-name w4a16-gptq" in body
    assert "/work/" not in body.split("## Serve it", 1)[1].split("##", 1)[0]   # nothing of the run's machine


def test_a_hub_base_model_is_in_the_metadata_and_a_hub_baseline_is_not_copied():
    meta, _ = card(base_model="org/base")
    assert meta["base_model"] == "org/base" and meta["base_model_relation"] == "quantized"
    meta, body = card("bf16", base_model="org/base", hub_model="org/base", hub_revision="v1")
    assert "base_model_relation" not in meta and "quantized" not in meta["tags"]
    assert "not copied into this folder" in body and "--model org/base" in body and "--revision v1" in body
    assert "is the run's baseline" in body


def test_an_undeployable_variants_card_says_so_on_its_first_line():
    meta, body = card(undeployable="variant w4a16-gptq is recorded failed (engine: no kernel)")
    assert body.lstrip("\n").splitlines()[0] == (f"> **{NOT_DEPLOYABLE}**: variant w4a16-gptq is recorded failed "
                                                 "(engine: no kernel); exported with --allow-undeployable. Do not "
                                                 "serve it.")
    assert "not-deployable" in meta["tags"]
