"""The noise floor: N cold measurements give a log sd that widens a single run's interval (perf/noise.py); a
broken noise-floor file is a recipe error before work."""

from __future__ import annotations

import json
import math

import pytest

from core.recipe_perf import Perf
from perf.noise import NoiseFloorError, has_run_to_run_noise, load, measure, with_noise_floor
from perf.repeats import WITHIN
from perf.validate import check_workloads


def _level(tok_s: float, within: float) -> dict:
    return {"concurrency": 8, "repeats": 1, "method": WITHIN,
            "figures": {"output_tokens_per_s": {"median": tok_s, "ci95": [tok_s * (1 - within), tok_s * (1 + within)]},
                        "ttft_ms.p99": {"median": 40.0, "ci95": [30.0, None]}}}


def test_cold_runs_27_percent_apart_widen_a_2_percent_interval_to_tens_of_percent():
    floor = measure({"output_tokens_per_s": [765.0, 966.0, 760.0], "ttft_ms.p99": [None, 40.0]})
    noise = floor["figures"]["output_tokens_per_s"]
    assert noise["runs"] == 3 and noise["spread"] == pytest.approx(966 / 760 - 1)
    assert noise["log_sd"] == pytest.approx(float(__import__("numpy").log([765, 966, 760]).std(ddof=1)))
    assert "ttft_ms.p99" not in floor["figures"]   # one value: no spread to measure
    level = with_noise_floor(_level(1000.0, 0.02), floor, "floor.json")
    low, high = level["figures"]["output_tokens_per_s"]["ci95"]
    assert low < 1000 / 1.5 and high > 1000 * 1.5   # t(2) = 4.3 times a log sd of 0.13
    assert math.isclose(math.log(1000 / low), math.log(high / 1000))
    assert level["figures"]["ttft_ms.p99"] == {"median": 40.0, "ci95": [30.0, None]}   # not covered: as it was
    assert has_run_to_run_noise(level, "output_tokens_per_s") and not has_run_to_run_noise(level, "ttft_ms.p99")
    assert not has_run_to_run_noise(_level(1000.0, 0.02), "output_tokens_per_s")
    assert level["noise_floor"]["source"] == "floor.json"


def test_a_floor_of_zero_leaves_the_within_run_interval():
    floor = {"figures": {"output_tokens_per_s": {"log_sd": 0.0, "runs": 4}}}
    ci = with_noise_floor(_level(100.0, 0.1), floor)["figures"]["output_tokens_per_s"]["ci95"]
    assert ci == pytest.approx([90.0, 100 / 0.9])   # the wider end, both ways on the log scale


@pytest.mark.parametrize("text,problem", [("{", "cannot read a noise floor"), ("{}", "no figures"),
                                          ('{"figures": {"output_tokens_per_s": {"log_sd": 0.1, "runs": 1}}}',
                                           "needs log_sd >= 0 and runs >= 2")])
def test_a_broken_noise_floor_is_one_clear_recipe_error(tmp_path, text, problem):
    path = tmp_path / "floor.json"
    path.write_text(text)
    with pytest.raises(NoiseFloorError, match=problem):
        load(path)
    found = check_workloads(Perf(noise_floor=str(path)), None, [])
    assert [(where, problem in message) for where, message in found.errors] == [(("perf", "noise_floor"), True)]
    missing = check_workloads(Perf(noise_floor=str(tmp_path / "none.json")), None, [])
    assert "cannot read a noise floor" in missing.errors[0][1]
    path.write_text(json.dumps(measure({"output_tokens_per_s": [100.0, 110.0]})))
    assert check_workloads(Perf(noise_floor=str(path)), None, []).errors == []


def test_the_benchmark_widens_a_stored_run_by_a_floor_measured_before(tmp_path, monkeypatch, capsys):
    """benchmarks/noise_floor.py --floor F --results R: each variant's headline interval before and after, with no
    server started; a floor that cannot be read is one line, exit 2."""
    from benchmarks import noise_floor
    from core.run_layout import RunLayout
    from tests.fixtures import variant, write_run

    floor = tmp_path / "floor.json"   # five cold starts on a 2-core CPU: log sd 0.147
    floor.write_text(json.dumps(measure({"output_tokens_per_s": [1966.0, 1744.0, 1390.0, 2004.0, 1688.0]})))
    run = write_run(tmp_path / "run", {"bf16": variant({}, tok_s=1000.0), "int8": variant({}, tok_s=1500.0)})
    monkeypatch.setattr("sys.argv", ["noise_floor.py", "--floor", str(floor), "--results", str(RunLayout(run).results)])
    noise_floor.main()
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()
            if line.startswith(("  bf16", "  int8"))}
    assert rows["bf16"][1:5] == ["1000", "[950,", "1050]", "±5.3%"]   # its own interval: +-5%, as stored
    # half-width on the log scale: sqrt(log(1 / 0.95)^2 + (t(4) * 0.147)^2) = sqrt(0.0513^2 + 0.4078^2) = 0.411
    assert rows["int8"][-3:] == ["[995,", "2262]", "±50.8%"]
    monkeypatch.setattr("sys.argv", ["noise_floor.py", "--floor", str(tmp_path / "none.json")])
    with pytest.raises(SystemExit) as exit_:
        noise_floor.main()
    assert exit_.value.code == 2 and "cannot read a noise floor" in capsys.readouterr().err
