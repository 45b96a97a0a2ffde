"""Automatic mixed precision vs random: keep the K units the sensitivity analysis ranks highest in 16-bit,
or K units drawn at random (several draws), quantize the rest with the variant's weights (round to nearest,
as the analysis does), and score every task in-process on the same items. Reports per task the accuracy
with nothing kept, with the automatic choice and with each random draw, and the accuracy recovered per kept
unit, side by side in one run.

A score that is lower-is-better (bits per byte) is shown as is; "recovered" is then a decrease.

Usage: python benchmarks/sensitivity_vs_random.py RECIPE [--variant V] [--keep 4] [--draws 5] [--limit N]
           [--tasks KEY ...] [--cache-dir DIR]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from evals.backends.inprocess import inprocess_lm
from evals.runner import evaluate_task
from core.hashing import tree_digest
from quant.models import resolve_model
from quant.progress import Reporter
from core.recipe import load_recipe
from quant.sensitivity_stage import ranking
from core.store import Cache
from quantize.sensitivity import fake_quantize_weight, is_kept, keep_random, keep_top, linear_modules, weight_args


def accuracy(model_dir: Path, variant, kept: list[str], tasks) -> dict[str, tuple[float, bool]]:
    """task key -> (primary score, higher is better)."""
    lm = inprocess_lm(model_dir)
    args, modules = weight_args(variant), dict(lm.model.named_modules())
    for name in linear_modules(lm.model):
        if not is_kept(name, [*variant.ignore, *kept]):
            modules[name].weight.data = fake_quantize_weight(modules[name].weight.data, args)
    out = {}
    for task in tasks:
        summary, _ = evaluate_task(lm, task)
        entry = summary[summary["primary"]]
        out[task.key] = (entry["value"], entry.get("higher_is_better", True))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recipe")
    ap.add_argument("--variant", help="default: the first variant with `weights` or a scheme")
    ap.add_argument("--keep", type=int, default=4)
    ap.add_argument("--draws", type=int, default=5)
    ap.add_argument("--limit", type=int, default=None, help="items per task (default: all)")
    ap.add_argument("--tasks", nargs="+", default=None, help="task keys of the recipe to score (default: all)")
    ap.add_argument("--cache-dir", default="runs/.cache")
    args = ap.parse_args()
    recipe = load_recipe(args.recipe)
    variant = (recipe.variant(args.variant) if args.variant
               else next(v for v in recipe.variants if v.weights is not None or v.scheme is not None))
    tasks = [t.model_copy(update={"limit": args.limit or t.limit}) for t in recipe.tasks
             if args.tasks is None or t.key in args.tasks]
    model_dir = resolve_model(recipe.model, Path(args.recipe).parent)
    ranked = ranking(Cache(Path(args.cache_dir)), Reporter(), model_dir, tree_digest(model_dir), recipe, variant)
    configs = {"none kept": [], f"auto top {args.keep}": keep_top(ranked, args.keep)}
    configs |= {f"random {args.keep} #{seed}": keep_random(ranked, args.keep, seed) for seed in range(args.draws)}
    base = accuracy(model_dir, variant.model_copy(update={"ignore": ["re:.*"]}), [], tasks)
    scores = {name: accuracy(model_dir, variant, kept, tasks) for name, kept in configs.items()}
    higher = {k: up for k, (_, up) in base.items()}
    base = {k: value for k, (value, _) in base.items()}
    scores = {name: {k: value for k, (value, _) in s.items()} for name, s in scores.items()}
    keys = [t.key for t in tasks]
    print(f"{variant.name}: weights {ranked['weights']}; keep {args.keep} of {len(ranked['units'])} units "
          f"({ranked['by']}s); items per task: {args.limit or 'all'}")
    print(f"{'configuration':<18}" + "".join(f"{k:>18}" for k in keys) + "   kept units")
    print(f"{'16-bit':<18}" + "".join(f"{base[k]:>18.3f}" for k in keys))
    for name, kept in configs.items():
        units = sorted({r["unit"] for r in ranked["units"] if set(r["modules"]) & set(kept)})
        print(f"{name:<18}" + "".join(f"{scores[name][k]:>18.3f}" for k in keys) + "   " + ", ".join(units))
    none, auto = scores["none kept"], scores[f"auto top {args.keep}"]
    randoms = [s for n, s in scores.items() if n.startswith("random")]
    print(f"\nscore change per kept unit (vs none kept), auto vs random (mean ± sd over {len(randoms)} draws):")
    for k in keys:
        better = "higher" if higher[k] else "lower"
        per_random = [(r[k] - none[k]) / args.keep for r in randoms]
        sd = statistics.stdev(per_random) if len(per_random) > 1 else 0.0
        print(f"  {k:<18} auto {(auto[k] - none[k]) / args.keep:+.4f}   random {statistics.mean(per_random):+.4f} "
              f"± {sd:.4f}   (gap to 16-bit with nothing kept: {base[k] - none[k]:+.3f}; {better} is better)")


if __name__ == "__main__":
    main()
