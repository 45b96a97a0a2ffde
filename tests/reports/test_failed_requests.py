"""A perf figure never stands on requests that failed: where every request of a level failed it is not
measurable (no 0 tok/s, never ranked); where some failed, the count stands beside the figure in every output and
the gate's perf checks are inconclusive past `perf.max_failed_requests`."""

from __future__ import annotations

import json

from perf.metrics import summarize
from reports.choose import choose
from core.results import Results
from tests.fixtures import results, write_run
from tests.helpers import quant
from tests.reports.test_gate_perf import gate, perf_rows, runs_of


def failing(v: dict, errors: int, n: int = 8, tok_s: float | None = 268.0) -> dict:
    for point in v["perf"]["w"]["points"]:
        point.update(n=n, errors=errors, first_error="HTTP 307: elsewhere", output_tokens_per_s=tok_s)
    return v


def records(failed: int, ok: int) -> list[dict]:
    good = {"error": None, "ttft_s": 0.1, "itl_s": [0.01], "e2e_s": 0.2, "output_tokens": 2, "prompt_tokens": 4}
    return [dict(good) for _ in range(ok)] + [{**good, "error": "HTTP 503: busy", "output_tokens": 0}] * failed


def test_a_level_where_every_request_failed_measures_no_throughput_not_zero():
    point = summarize(records(failed=8, ok=0), wall_s=2.0, slo={"ttft_ms": 100})
    assert point["output_tokens_per_s"] is None and point["requests_per_s"] is None   # before: 0.0
    assert point["goodput_rps"] is None and point["errors"] == 8
    assert summarize(records(failed=2, ok=6), wall_s=2.0)["output_tokens_per_s"] == 6.0


def test_pareto_says_not_measurable_where_all_failed_and_the_count_where_some_did(tmp_path):
    from reports.render import render_all

    run = write_run(tmp_path / "run", {"bf16": failing(runs_of([300.0]), 2),
                                       "q": failing(runs_of([0.0]), 8, tok_s=None), "w8": runs_of([250.0])})
    md, _, page, *_ = render_all(run, json.loads((run / "results.json").read_text()))
    rows = perf_rows(md.read_text())
    assert "268 (2 of 8 requests failed)" in rows["bf16"]          # before: 268, no word of the errors
    assert "not measurable: all 8 requests failed" in rows["q"]   # before: 0 tok/s as a measured figure
    assert "failed" not in rows["w8"]
    assert "268 (2 of 8 requests failed)" in page.read_text()
    assert "not measurable: all 8 requests failed" in page.read_text()


def test_choose_never_ranks_a_variant_whose_requests_all_failed_and_shows_failures_beside_the_figure(tmp_path, capsys):
    document = Results.model_validate(results({"bf16": runs_of([100.0]),
                                               "q": failing(runs_of([5000.0]), 8, tok_s=None)}))
    picked = choose(document, ["math"], 0.05)[0]["math"]
    assert picked.variant == "bf16"
    assert picked.rejected["q"].startswith("perf not measurable: every request failed (HTTP 307: elsewhere")
    run = write_run(tmp_path / "run", {"bf16": failing(runs_of([100.0]), 2, n=200, tok_s=100.0)})
    code, out = quant("choose", str(run), "--task", "math")
    assert code == 0 and "100 output tok/s at concurrency 16 (2 of 200 requests failed)" in out, out


def test_gate_perf_checks_are_inconclusive_past_the_failed_request_limit(tmp_path):
    code, out = gate(tmp_path, runs_of([100.0]), failing(runs_of([100.0]), 2), "{max_throughput_drop: 0.1}")
    assert code == 3, out   # before: PASS on the 6 requests that happened to succeed
    assert "requests failed at the headline level: q 2 of 8 (more than 1%)" in out and "would be PASS" in out
    code, out = gate(tmp_path, runs_of([100.0]), failing(runs_of([100.0]), 8, tok_s=None),
                     "{max_throughput_drop: 0.1}")
    assert code == 3 and "measured no output tokens/s (every request failed)" in out, out
    code, out = gate(tmp_path, runs_of([100.0]), failing(runs_of([100.0]), 1, n=200, tok_s=100.0),
                     "{max_throughput_drop: 0.1}")
    assert code == 0 and "requests failed: q 1 of 200" in out, out   # within the limit: decided, count shown


def test_a_level_where_every_request_failed_is_listed_as_not_measurable(tmp_path):
    from quant.perf_stage import unmeasured_levels
    from reports.render import render_all

    result = {"points": [{"concurrency": 16, "n": 8, "errors": 8, "first_error": "HTTP 307: \x1b[2J" + "x" * 9000},
                         {"concurrency": 4, "n": 8, "errors": 2}]}
    listed = unmeasured_levels("w", result)
    assert list(listed) == ["w c=16"] and listed["w c=16"].startswith("every request failed (HTTP 307")
    assert len(listed["w c=16"]) < 400   # the server's text within a cap
    v = failing(runs_of([0.0]), 8, tok_s=None)
    v["not_measurable"] = {"perf": listed}
    run = write_run(tmp_path / "run", {"bf16": runs_of([100.0]), "q": v})
    md, *_ = render_all(run, json.loads((run / "results.json").read_text()))
    section = md.read_text().split("Not measurable on this engine")[1]
    assert "perf of w c=16: every request failed (HTTP 307" in section   # the variant is never "ok" unsaid
