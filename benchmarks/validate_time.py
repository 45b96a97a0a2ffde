"""How long `quant validate` takes to refuse each kind of malformed recipe (tests/quant/test_recipe_refused_before_work.py
builds them from tests/data/recipes/killed.yaml and the demo model), in three states of this machine's caches:

- cold: empty check and engine-flag caches (a fresh machine without `make setup`: the model's modules are
  built, llmcompressor's modifiers read and the engine's argument parser described, once);
- new recipe: those library facts known, but the recipe never seen (each fault spelt anew: a new typo, a new
  engine-argument value, parsed against the description of the engine's parser);
- repeat: the same recipe again.

Every run must exit 2. Usage: python benchmarks/validate_time.py [--work DIR] [--runs N] [--no-cold]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.quant.test_recipe_refused_before_work import KINDS, bad_recipe  # noqa: E402

FRESH = {"ignore-typo": ("lm_haed", "lm_h{}"), "invalid-regex": ("[z-a]", "[z-a]{}"),
         "targets-typo": ("self_atn", "self_a{}"), "engine-value": ("long", "l{}"),
         "engine-choice": ("fp99", "fp{}"),
         "keep-top": ("keep_top: 40", "keep_top: 4{}"), "max-bits": ("max_bits_per_weight: 3", "max_bits_per_weight: 3.{}"),
         "unknown-modifier": ("QuantizationModifer", "QuantizationModifer{}"),
         "unknown-argument": ("dampening_fraction", "dampening_fraction{}")}


def validate(path: Path, caches: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "QUANT_CHECK_CACHE": str(caches / "checks"), "QUANT_ENGINE_FLAGS_DIR": str(caches / "engine-flags")}
    started = time.perf_counter()
    proc = subprocess.run([str(REPO / ".venv/bin/python"), "-m", "quant.cli", "validate", str(path)], cwd=path.parent,
                          env=env, capture_output=True, text=True)
    took = time.perf_counter() - started
    if proc.returncode != 2 or "Traceback" in proc.stderr:
        raise SystemExit(f"{path}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-cold", action="store_true", help="leave the cold column out (minutes on 2 cores)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="validate-time-"))
    caches = work / "caches"
    print(f"{'kind':18} {'cold':>7} {'new recipe':>11} {'repeat':>7}   (seconds; median of {args.runs} for the last two)")
    for kind in KINDS:
        where = work / kind
        where.mkdir(parents=True, exist_ok=True)
        path = bad_recipe(where, kind)
        cold = float("nan") if args.no_cold else validate(path, work / f"cold-{kind}")
        validate(path, caches)   # this machine's library facts
        fresh, repeat = [], []
        original, template = FRESH[kind]
        for _ in range(args.runs):
            text = path.read_text()
            path.write_text(text.replace(original, template.format(random.randint(100000, 999999))))
            if path.read_text() == text:
                raise SystemExit(f"{kind}: {original!r} not in its recipe")
            fresh.append(validate(path, caches))
            repeat.append(validate(path, caches))
            path.write_text(text)
        print(f"{kind:18} {cold:7.2f} {statistics.median(fresh):11.2f} {statistics.median(repeat):7.2f}")


if __name__ == "__main__":
    main()
