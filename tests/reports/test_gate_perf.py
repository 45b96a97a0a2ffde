"""Perf gates respect noise: single runs near the limit and p99s from too few requests are inconclusive;
repeated levels decide with an interval; reports mark a p99 that rests on fewer than 100 requests."""

import json

import pytest

from perf.noise import with_noise_floor
from perf.repeats import WITHIN
from tests.fixtures import variant, write_run
from tests.helpers import quant


def runs_of(tok_s: list[float], requests: int = 200, noise_floor: dict | None = None) -> dict:
    """A variant whose headline level ran once per value of tok_s; one run with `noise_floor` has the interval
    its requests allow (+-1%) widened by it, as a sweep stores it."""
    v = variant({"math": 0.9})
    level = {"concurrency": 16, "repeats": 1, "method": WITHIN,
             "figures": {"output_tokens_per_s": {"median": tok_s[0], "ci95": [tok_s[0] * 0.99, tok_s[0] * 1.01]}}}
    v["perf"]["w"]["levels"] = [with_noise_floor(level, noise_floor, "noise-floor.json")] if noise_floor else []
    v["perf"]["w"]["points"] = [{"concurrency": 16, "output_tokens_per_s": t, "n": requests, "errors": 0,
                                 "ttft_ms": {"p99": 10.0, "n": requests}, "tpot_ms": {"p99": 2.0, "n": requests},
                                 "e2e_ms": {"p99": 90.0, "n": requests}} for t in tok_s]
    return v


def gate(tmp_path, base: dict, cand: dict, perf: str) -> tuple[int, str]:
    run = write_run(tmp_path / "run", {"bf16": base, "q": cand}, gates={"max_drop": 0.05})
    policy = tmp_path / "p.yaml"
    policy.write_text(f"max_drop: 0.05\nperf: {perf}\n")
    return quant("gate", "--baseline", str(run), "--candidate", f"{run}:q", "--policy", str(policy))


@pytest.mark.parametrize("cand,expected", [(100.0, 0), (91.0, 3), (80.0, 1)])
def test_single_run_throughput_within_the_noise_band_is_inconclusive(tmp_path, cand, expected):
    code, out = gate(tmp_path, runs_of([100.0]), runs_of([cand]), "{max_throughput_drop: 0.1}")
    assert code == expected, out
    assert "single runs, noise band +-5%" in out


@pytest.mark.parametrize("cand,expected", [(100.0, 0), (91.0, 3), (75.0, 1)])
def test_single_runs_decide_by_intervals_their_noise_floor_widened(tmp_path, cand, expected):
    """log sd 0.02 over 5 cold runs: each run +-5.6%, the ratio about +-8%; limit 10%."""
    floor = {"figures": {"output_tokens_per_s": {"log_sd": 0.02, "runs": 5}}}
    code, out = gate(tmp_path, runs_of([100.0], noise_floor=floor), runs_of([cand], noise_floor=floor),
                     "{max_throughput_drop: 0.1}")
    assert code == expected, out
    assert "widened by the noise floor" in out and "single runs, noise band" not in out


@pytest.mark.parametrize("cand,expected", [([99.0, 101.0, 100.0], 0), ([80.0, 81.0, 79.0], 1),
                                           ([60.0, 100.0, 140.0], 3)])
def test_repeated_levels_decide_by_an_interval_of_the_ratio(tmp_path, cand, expected):
    code, out = gate(tmp_path, runs_of([100.0, 99.0, 101.0]), runs_of(cand), "{max_throughput_drop: 0.1}")
    assert code == expected, out
    assert "Welch t on log tok/s" in out and "3 vs 3 repeated runs" in out


def test_p99_slo_on_too_few_requests_is_inconclusive(tmp_path):
    code, out = gate(tmp_path, runs_of([100.0], 16), runs_of([100.0], 16), "{ttft_p99_ms: 50}")
    assert code == 3 and "from 16 samples: a p99 needs >= 100" in out, out
    code, out = gate(tmp_path, runs_of([100.0], 200), runs_of([100.0], 200), "{ttft_p99_ms: 50}")
    assert code == 0, out


def perf_rows(md: str) -> dict[str, str]:
    """pareto.md's perf table: variant -> its row."""
    table = md.split("## Performance and memory")[1].split("\n## ")[0]
    return {line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("| ")}


def test_pareto_marks_a_p99_from_too_few_requests(tmp_path):
    from reports.render import render_all

    run = write_run(tmp_path / "run", {"bf16": runs_of([100.0], 16), "q": runs_of([100.0], 200)})
    md, _, page, *_ = render_all(run, json.loads((run / "results.json").read_text()))
    rows = perf_rows(md.read_text())
    assert "10.0\\*" in rows["bf16"] and "10.0\\*" not in rows["q"]
    assert "p99 from fewer than 100 requests" in md.read_text() and "10.0*" in page.read_text()


def under_foreign_load(v: dict, cores: float = 1.4) -> dict:
    for point in v["perf"]["w"]["points"]:
        point["host_load"] = {"wall_s": 10.0, "cpus": 2, "host_busy_cpu_s": 19.0, "own_cpu_s": 19.0 - 10 * cores,
                              "foreign_cpu_s": 10 * cores, "foreign_cores": cores, "loadavg_1m": 3.1,
                              "limit_cores": 0.5, "foreign_load": cores >= 0.5}
    return v


@pytest.mark.parametrize("flagged", ["baseline", "candidate"])
def test_perf_measured_under_foreign_load_is_inconclusive_unless_allowed(tmp_path, flagged):
    base, cand = runs_of([100.0]), runs_of([100.0])
    under_foreign_load(base if flagged == "baseline" else cand)
    code, out = gate(tmp_path, base, cand, "{max_throughput_drop: 0.1, ttft_p99_ms: 50}")
    name = "bf16" if flagged == "baseline" else "q"
    assert code == 3, out
    assert f"measured under foreign load: {name} (1 of 1 headline runs, up to 1.40 cores" in out, out
    assert "--allow-foreign-load" in out and "would be PASS" in out
    policy = tmp_path / "p.yaml"
    run = tmp_path / "run"
    code, out = quant("gate", "--baseline", str(run), "--candidate", f"{run}:q", "--policy", str(policy),
                      "--allow-foreign-load")
    assert code == 0 and "(allowed)" in out, out
    policy.write_text("max_drop: 0.05\nperf: {max_throughput_drop: 0.1, allow_foreign_load: true}\n")
    code, out = quant("gate", "--baseline", str(run), "--candidate", f"{run}:q", "--policy", str(policy))
    assert code == 0 and "(allowed)" in out, out


def test_a_regression_under_foreign_load_is_inconclusive_too(tmp_path):
    code, out = gate(tmp_path, runs_of([100.0]), under_foreign_load(runs_of([50.0])), "{max_throughput_drop: 0.1}")
    assert code == 3 and "would be REGRESSION" in out, out


def test_a_level_below_the_foreign_load_limit_gates_as_usual(tmp_path):
    code, out = gate(tmp_path, under_foreign_load(runs_of([100.0]), 0.2), runs_of([100.0]),
                     "{max_throughput_drop: 0.1}")
    assert code == 0 and "foreign load" not in out, out


def test_pareto_marks_tok_s_measured_under_foreign_load(tmp_path):
    from reports.render import render_all

    run = write_run(tmp_path / "run", {"bf16": under_foreign_load(runs_of([100.0])), "q": runs_of([100.0])})
    md, _, page, *_ = render_all(run, json.loads((run / "results.json").read_text()))
    rows = perf_rows(md.read_text())
    assert "100 † (1.40)" in rows["bf16"] and "†" not in rows["q"]
    assert "† measured under foreign load" in md.read_text() and "100 † (1.40)" in page.read_text()
