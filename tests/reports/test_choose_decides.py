"""`quant choose` picks only on differences the numbers support: overlapping intervals (run-to-run noise
included) are a tie that goes to accuracy, then memory; perf measured under foreign load, or without an interval
that includes run-to-run noise, never ranks by speed; a variant the gate blocks is named
(or, with --exclude-blocked, kept out)."""

from __future__ import annotations

from core.results import HostLoad, Results, VariantRecord, WorkloadResult
from perf.noise import with_noise_floor
from perf.repeats import WITHIN
from quant.cli import main
from reports.choose import choose
from tests.fixtures import accuracy, perf_point, results, write_run

LOAD = HostLoad(wall_s=10, cpus=2, host_busy_cpu_s=18, own_cpu_s=10, foreign_cpu_s=8, foreign_cores=0.8,
                loadavg_1m=2.5, limit_cores=0.5, foreign_load=True).dump()


def _variant(acc: dict[str, float], runs: list[float], size: int = 1, loaded: bool = False,
             half_width: float = 0.005, within: float | None = None, floor: dict | None = None) -> dict:
    """Served, scored `acc` (95% intervals +-half_width); its headline level run once per value of `runs`.
    A single run with `within`: its requests' interval (+-within), widened by the noise floor `floor` if given."""
    points = [perf_point(tok_s, concurrency=8, **({"repeat": i} if i else {}), **({"host_load": LOAD} if loaded
                                                                                 else {}))
              for i, tok_s in enumerate(runs)]
    levels = []
    if within is not None:
        level = {"concurrency": 8, "repeats": 1, "method": WITHIN, "figures": {"output_tokens_per_s": {
            "median": runs[0], "ci95": [runs[0] * (1 - within), runs[0] * (1 + within)]}}}
        levels = [with_noise_floor(level, floor, "noise-floor.json")]
    return VariantRecord(status="ok", checkpoint="/ckpt", size_bytes=size,
                         accuracy={t: accuracy(v, half_width=half_width) for t, v in acc.items()},
                         perf={"w": WorkloadResult(points=points, levels=levels)}).dump()


def _pick(variants: dict, task: str = "code", **kw):
    document = Results.model_validate(results(variants))
    return choose(document, [task], 0.05, **kw)[0][task]


def test_a_speed_difference_beyond_both_intervals_decides():
    c = _pick({"bf16": _variant({"code": 0.98}, [500, 510, 505]),
               "fast": _variant({"code": 0.97}, [1000, 1010, 990])})
    assert c.variant == "fast" and c.why.startswith("decided by throughput")
    assert "fast 1000 [" in c.why and "bf16 505 [" in c.why


def test_overlapping_intervals_are_a_tie_that_accuracy_breaks():
    """1000 against 989 tok/s, each noisy: tied; the more accurate variant wins and the line says so."""
    c = _pick({"bf16": _variant({"code": 0.99}, [989, 940, 1030]),
               "canary": _variant({"code": 0.97}, [1000, 950, 1045])})
    assert c.variant == "bf16"
    assert "throughput tied (95% intervals overlap" in c.why and "decided by accuracy" in c.why
    assert "canary 1000 [" in c.why and "bf16 0.990 [0.985, 0.995] (drop +0.000)" in c.why


def test_one_run_without_run_to_run_noise_is_not_ranked_and_says_why():
    """Two single runs 15% apart, each with a narrow interval from its requests: no run-to-run noise measured,
    so speed is not ranked; the tie goes to accuracy."""
    c = _pick({"bf16": _variant({"code": 0.99}, [989], within=0.01), "canary": _variant({"code": 0.96}, [1150], within=0.01)})
    assert c.variant == "bf16" and "throughput not ranked, no 95% interval with run-to-run noise" in c.why
    assert "bf16 989 output tok/s, canary 1150 output tok/s: one run on one server start" in c.why
    assert "benchmarks/noise_floor.py" in c.why and "decided by accuracy" in c.why


def test_identical_kernels_tie_once_the_noise_floor_widens_their_single_runs():
    """The demo's int8 pair: 1840 and 1203 tok/s with within-run intervals far apart; this machine's noise
    floor (log sd 0.15 over 5 cold runs) makes them overlap: a tie, decided by accuracy, not by the machine."""
    floor = {"figures": {"output_tokens_per_s": {"log_sd": 0.15, "runs": 5}}}
    canary = _variant({"code": 0.96}, [1840], within=0.016, floor=floor)
    smooth = _variant({"code": 0.99}, [1203], within=0.009, floor=floor)
    c = _pick({"bf16": smooth, "canary": canary})
    assert c.variant == "bf16" and "throughput tied (95% intervals overlap" in c.why
    # without the floor the same runs are not ranked at all; with a floor too small to matter the faster wins
    tiny = {"figures": {"output_tokens_per_s": {"log_sd": 0.001, "runs": 5}}}
    fast = _pick({"bf16": _variant({"code": 0.99}, [1203], within=0.009, floor=tiny),
                  "canary": _variant({"code": 0.97}, [1840], within=0.016, floor=tiny)})
    assert fast.variant == "canary" and fast.why.startswith("decided by throughput")


def test_a_tie_in_speed_and_accuracy_goes_to_memory():
    """One item more or less is no accuracy difference: scores whose intervals overlap are tied too."""
    c = _pick({"bf16": _variant({"code": 0.980}, [990, 960, 1010], size=2_000_000, half_width=0.02),
               "w4": _variant({"code": 0.976}, [1000, 970, 1020], size=500_000, half_width=0.02),
               "w8": _variant({"code": 0.984}, [995, 965, 1015], size=1_000_000, half_width=0.02)})
    assert c.variant == "w4" and "accuracy tied (95% intervals overlap" in c.why
    assert "decided by memory" in c.why and "w4 0.5 MB" in c.why


def test_perf_under_foreign_load_never_ranks_by_speed():
    """The loaded variant is twice as fast on paper: speed is not ranked, accuracy decides, and the line says why."""
    c = _pick({"bf16": _variant({"code": 0.99}, [500, 505, 510]),
               "canary": _variant({"code": 0.98}, [1000, 1005, 1010], loaded=True)})
    assert c.variant == "bf16"
    assert "throughput not ranked: measured under foreign load: canary (0.80 cores" in c.why


def test_a_blocked_variant_is_named_where_picked_and_excluded_on_request():
    variants = {"bf16": _variant({"code": 0.98, "math": 0.9}, [500, 505, 510]),
                "canary": _variant({"code": 0.98, "math": 0.5}, [1000, 1005, 1010])}
    blocked = {"canary": "regression: math exact_match: drop 0.400 > margin 0.020"}
    c = _pick(variants, blocked=blocked)
    assert c.variant == "canary" and c.blocked == blocked["canary"]
    c = _pick(variants, blocked=blocked, exclude_blocked=True)
    assert c.variant == "bf16" and "blocked by the gate" in c.rejected["canary"]


def test_between_the_same_size_a_variant_the_gate_does_not_block_is_picked():
    """The canary and SmoothQuant are one int8 scheme: their checkpoints differ by metadata only. Where memory
    decides, the one the gate passes wins; a smaller size beyond 1% still wins, named as blocked."""
    blocked = {"canary": "regression: math exact_match: drop 0.400 > margin 0.020"}
    same = {"bf16": _variant({"code": 0.98}, [500], size=2_000_000, loaded=True),
            "canary": _variant({"code": 0.98}, [600], size=1_000_000, loaded=True),
            "smooth": _variant({"code": 0.98}, [550], size=1_000_400, loaded=True)}
    c = _pick(same, blocked=blocked)
    assert c.variant == "smooth" and c.blocked is None and "within 1% of canary, which the gate blocks" in c.why
    c = _pick(same, blocked=blocked, objective="memory")
    assert c.variant == "smooth" and "within 1% of canary" in c.why
    c = _pick(same | {"smooth": _variant({"code": 0.98}, [550], size=1_200_000, loaded=True)}, blocked=blocked)
    assert c.variant == "canary" and c.blocked == blocked["canary"] and "which the gate blocks" not in c.why


def test_choose_names_the_variant_the_gate_blocks(tmp_path, capsys):
    """The gate blocks canary on math (a drop of 0.4 against a margin of 0.02): picked for code, it is named."""
    run = write_run(tmp_path / "run", {"bf16": _variant({"code": 0.98, "math": 0.9}, [500, 505, 510]),
                                       "canary": _variant({"code": 0.98, "math": 0.5}, [1000, 1005, 1010])})
    assert main(["choose", str(run), "--task", "code"]) == 0
    out = capsys.readouterr().out
    assert "code: deploy canary (blocked by the gate)" in out and "blocked: the recipe's gate blocks canary" in out
    assert main(["choose", str(run), "--task", "code", "--exclude-blocked"]) == 0
    out = capsys.readouterr().out
    assert "code: deploy bf16" in out and "not canary: blocked by the gate: regression" in out
