"""The sweep's perf stage and the noise floor: the recipe's `perf.noise_floor` widens every stored level's
intervals as the run's results are collected, and neither it nor an unset time budget changes what is measured
(the perf cache key)."""

import json
import sys

from core.recipe import parse_recipe
from core.store import Cache
from perf.repeats import WITHIN
from quant.context import Checkpoint, SweepContext
from quant.perf_stage import STAGE_PERF, PerfStage, perf_key
from quant.progress import Reporter
from tests.helpers import DEMO_MODEL

RECIPE = ("name: r\nmodel: demo\ntasks: [demo_math]\nperf: {{workloads: [{{name: w, prompt_tokens: 64, "
          "output_tokens: 8, concurrency: [8]{budget}}}]{floor}}}\nvariants:\n  - {{name: bf16, baseline: true}}\n")


def _ctx(tmp_path, budget: str = "", floor: str = "") -> SweepContext:
    recipe = parse_recipe(RECIPE.format(budget=budget, floor=floor))
    return SweepContext(recipe=recipe, out=tmp_path / "run", cache=Cache(tmp_path / "cache"), model_dir=DEMO_MODEL,
                        model_key="demo", engine_python=sys.executable, engine_version=None,
                        reporter=Reporter(quiet=True))


def test_collected_levels_are_widened_by_the_noise_floor_without_measuring_again(tmp_path):
    floor = tmp_path / "noise-floor.json"
    floor.write_text(json.dumps({"figures": {"output_tokens_per_s": {"log_sd": 0.1, "runs": 5}}}))
    plain, widened = _ctx(tmp_path), _ctx(tmp_path, floor=f", noise_floor: {floor}")
    workload = plain.recipe.perf.workloads[0]
    assert perf_key(plain, workload, "ck", {}) == perf_key(widened, workload, "ck", {})
    bounded = _ctx(tmp_path, ", max_seconds: 30")
    assert perf_key(plain, workload, "ck", {}) != perf_key(bounded, bounded.recipe.perf.workloads[0], "ck", {})
    level = {"concurrency": 8, "repeats": 1, "method": WITHIN,
             "figures": {"output_tokens_per_s": {"median": 1000.0, "ci95": [990.0, 1010.0]}}}
    checkpoint = Checkpoint(path=DEMO_MODEL, key="ck", manifest={}, size_bytes=1)
    widened.cache.save_json(STAGE_PERF, PerfStage(widened, widened.recipe.variants[0], checkpoint, {}).keys["w"],
                            {"points": [{"concurrency": 8}], "levels": [level]}, extra={"records.jsonl": []})
    stage = PerfStage(widened, widened.recipe.variants[0], checkpoint, {})
    assert not stage.pending() and not PerfStage(plain, plain.recipe.variants[0], checkpoint, {}).pending()
    record = {"perf": {}, "memory": {}}
    stage.collect(record)
    (collected,) = record["perf"]["w"]["levels"]
    low, high = collected["figures"]["output_tokens_per_s"]["ci95"]
    assert low < 800 and high > 1250   # t(4) x 0.1 on the log scale: about +-28%
    assert collected["noise_floor"] == {"source": str(floor), "figures": {"output_tokens_per_s": {"log_sd": 0.1, "runs": 5}}}
    record = {"perf": {}, "memory": {}}
    PerfStage(plain, plain.recipe.variants[0], checkpoint, {}).collect(record)
    assert record["perf"]["w"]["levels"] == [level]   # no noise floor: as measured
