"""The typed results schema (core.results): the demo's results.json round-trips through it byte for byte, the
sweep writes through it, and a file that is old, newer or not ours is one clear error."""

import json

import pytest
from pydantic import ValidationError

from core.recipe import parse_recipe
from core.results import SCHEMA_VERSION, Results
from core.run_layout import RunLayout
from core.store import write_json
from quant.results_writer import ResultsWriter
from quant.sweep import _load_previous
from reports.results_file import ResultsError, load_results, read_results
from tests.fixtures import results, variant, write_run
from tests.helpers import REPO

DEMO_RESULTS = REPO / "tests/data/demo_results.json"   # a `quant sweep recipes/demo-full.yaml`
RECIPE = parse_recipe("name: t\nmodel: demo\nvariants: [{name: bf16, baseline: true}, {name: q, scheme: W4A16}]\n"
                      "tasks: [demo_math]\n")


def test_the_demo_results_round_trip_byte_for_byte(tmp_path):
    text = DEMO_RESULTS.read_text()
    parsed = Results.model_validate(json.loads(text))
    write_json(tmp_path / "results.json", parsed.dump())   # as the sweep writes it
    assert (tmp_path / "results.json").read_text() == text
    assert parsed.schema_version == SCHEMA_VERSION and parsed.baseline_record.ok
    point = parsed.variants["bf16"].perf["fixed-128-64"].points[0]
    assert point.ttft_ms.p99_9 is not None and point.ttft_ms.n == point.n   # "p99.9" read under a name
    assert set(parsed.tasks()) == {"demo_code", "demo_math", "demo_extraction"}


def test_a_nan_measurement_stays_nan():
    """A throughput over a zero wall time is NaN in results.json, as before the schema (not null)."""
    data = results({"bf16": variant({"math": 0.9})})
    data["variants"]["bf16"]["perf"]["w"]["points"][0] |= {"requests_per_s": float("nan"), "wall_s": 0.0}
    assert '"requests_per_s": NaN' in json.dumps(Results.model_validate(data).dump())


def test_fields_the_schema_does_not_declare_are_kept(tmp_path):
    data = results({"bf16": variant({"math": 0.9}, future_fact={"a": 1})}, future_top=[1, 2])
    data["variants"]["bf16"]["accuracy"]["math"]["future_stat"] = 0.5
    assert Results.model_validate(data).dump() == data


@pytest.mark.parametrize("change, message", [
    (lambda d: d.pop("schema_version"), "written before results.json had a schema_version; re-run `quant sweep`"),
    (lambda d: d.update(schema_version=SCHEMA_VERSION + 1), f"this quant-suite reads version {SCHEMA_VERSION}"),
    (lambda d: d["variants"]["bf16"].update(status="fine"), "variants.bf16.status is 'fine'"),
    (lambda d: d["variants"]["bf16"]["accuracy"]["math"].pop("n"), "variants.bf16.accuracy.math.n is missing"),
    (lambda d: d["variants"]["bf16"]["accuracy"]["math"].update(n=True), "accuracy.math.n is True: not a count"),
    (lambda d: d.update(baseline="fp32"), "baseline 'fp32' is not one of its variants (bf16)"),
])
def test_a_bad_file_is_one_line_naming_where(tmp_path, change, message):
    data = results({"bf16": variant({"math": 0.9})})
    change(data)
    run = tmp_path / "run"
    run.mkdir()
    RunLayout(run).results.write_text(json.dumps(data))
    for read in (read_results, load_results):
        with pytest.raises(ResultsError) as info:
            read(run)
        text = str(info.value)
        assert text.startswith(f"{run / 'results.json'}: ") and message in text and "\n" not in text


def test_the_sweep_writes_through_the_schema(tmp_path):
    document = _load_previous(tmp_path, RECIPE)
    assert list(document)[:2] == ["schema_version", "recipe_name"] and document["schema_version"] == SCHEMA_VERSION
    document["variants"]["bf16"] = variant({"math": 0.9})
    writer = ResultsWriter(tmp_path, remote=None, variants={"bf16"})
    writer.save(document)
    assert load_results(tmp_path).variants["bf16"].accuracy["math"].value == 0.9
    document["variants"]["bf16"]["accuracy"]["math"]["value"] = float("nan")
    with pytest.raises(ValidationError):   # a stage's bad number fails where it is written, not in a reader
        writer.save(document)


def test_a_rerun_keeps_the_variants_of_an_unversioned_run(tmp_path):
    """Re-running the sweep is how an old run directory is brought up to the schema."""
    old = results({"bf16": variant({"math": 0.9}), "gone": variant({"math": 0.1})}, recipe_name="t",
                  baseline_zero_tasks=[])
    del old["schema_version"]
    RunLayout(tmp_path).results.write_text(json.dumps(old))
    document = _load_previous(tmp_path, RECIPE)
    assert list(document["variants"]) == ["bf16"] and document["schema_version"] == SCHEMA_VERSION


def test_a_run_directory_and_its_results_file_are_one_layout(tmp_path):
    run = write_run(tmp_path / "run", {"bf16": variant({"math": 0.9})})
    assert RunLayout.of(run) == RunLayout.of(run / "results.json") == RunLayout(run)
    assert RunLayout(run).variant("q").items("math") == run / "variants" / "q" / "evals" / "math.jsonl"
