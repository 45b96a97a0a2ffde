"""The `quant` command."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from quant.recipe import RecipeError, load_recipe

EXIT_OK, EXIT_FAIL, EXIT_ERROR = 0, 1, 2


def _offline_defaults() -> None:
    # Runs never reach a hub; models and data come from local paths (set before transformers imports).
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TQDM_DISABLE", "1")  # library bars (read when tqdm is imported); we draw our own


def cmd_sweep(args) -> int:
    from perf.engines.process import EngineStartError
    from quant.models import ModelNotFound
    from quant.progress import Reporter
    from quant.sweep import run_sweep

    recipe = load_recipe(args.recipe)
    out = Path(args.out) if args.out else Path("runs") / recipe.name
    try:
        results = run_sweep(recipe, out, recipe_path=Path(args.recipe), reporter=Reporter(quiet=args.quiet),
                            cache_dir=Path(args.cache_dir) if args.cache_dir else None,
                            only=args.only, retry_failed=args.retry_failed)
    except (ModelNotFound, EngineStartError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print((out / "pareto.md").read_text())
    failed = [n for n, v in results["variants"].items() if v["status"] == "failed"]
    return EXIT_FAIL if failed and args.strict else EXIT_OK


def cmd_gate(args) -> int:
    from reports.gate import ERROR, PASS, REGRESSION, GateInputError, compare, format_checks, junit_xml, \
        load_policy, load_side, pick_variant

    try:
        base_results, base_variant = load_side(args.baseline)
        cand_results, cand_variant = load_side(args.candidate)
        baseline = pick_variant(base_results, base_variant, default_baseline=True, label="--baseline")
        candidate = pick_variant(cand_results, cand_variant, default_baseline=False, label="--candidate")
        policy = load_policy(Path(args.policy) if args.policy else None, cand_results)
        checks = compare(baseline, candidate, policy)
    except GateInputError as exc:
        print(f"gate error: {exc}", file=sys.stderr)
        return ERROR
    print(format_checks(checks, baseline["name"], candidate["name"]))
    if args.junit:
        Path(args.junit).write_text(junit_xml(checks, f"quant-gate.{candidate['name']}"))
    return PASS if all(c.passed for c in checks) else REGRESSION


def cmd_choose(args) -> int:
    from perf.engines.vllm import serve_command
    from reports.choose import choose
    from reports.gate import GateInputError, load_side

    try:
        results, _ = load_side(args.run)
        choice = choose(results, args.task, args.max_drop)
    except (GateInputError, KeyError) as exc:
        print(f"choose error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if choice is None:
        print(f"no served variant keeps {args.task} within a drop of {args.max_drop}", file=sys.stderr)
        return EXIT_FAIL
    engine_args = results["recipe"].get("engine", {}).get("args", {})
    command = serve_command(choice.checkpoint, choice.variant, engine_args, cuda=args.cuda)
    if args.json:
        print(json.dumps({"task": args.task, "variant": choice.variant, "accuracy": choice.accuracy,
                          "drop": choice.drop, "output_tokens_per_s": choice.out_tok_s,
                          "concurrency": choice.concurrency, "serve_command": command,
                          "rejected": dict(choice.rejected)}, indent=2))
        return EXIT_OK
    print(f"{args.task}: deploy {choice.variant}")
    print(f"  why: fastest variant within a drop of {args.max_drop:.3f} — accuracy {choice.accuracy:.3f} "
          f"(drop {choice.drop:+.3f}), {choice.out_tok_s:.0f} output tok/s at concurrency {choice.concurrency}")
    for name, why in choice.rejected:
        print(f"  not {name}: {why}")
    print(f"  serve: {command}")
    return EXIT_OK


def cmd_report(args) -> int:
    from quant.store import read_json
    from reports.render import render_all

    path = Path(args.run)
    results_path = path / "results.json" if path.is_dir() else path
    if not results_path.is_file():
        print(f"report error: {results_path}: no such file", file=sys.stderr)
        return EXIT_ERROR
    for written in render_all(results_path.parent, read_json(results_path)):
        print(written)
    return EXIT_OK


def cmd_demo(args) -> int:
    if args.what == "build-tasks":
        from evals.demo.build import write_test_sets
        for task, path in write_test_sets().items():
            print(f"{task}: {path}")
    else:
        from quant.demo.train import main as train_main
        train_main(["--steps", str(args.steps)] + (["--out", args.out] if args.out else []))
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="quant", description="LLM quantization accuracy and performance regression suite")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("sweep", help="quantize, serve, evaluate and benchmark every variant of a recipe")
    s.add_argument("recipe")
    s.add_argument("--out", help="run directory (default runs/<recipe name>)")
    s.add_argument("--cache-dir", help="stage cache (default: <out>/../.cache)")
    s.add_argument("--only", nargs="+", metavar="VARIANT", help="run only these variants")
    s.add_argument("--retry-failed", action="store_true", help="retry variants the engine rejected before")
    s.add_argument("--strict", action="store_true", help="exit 1 when any variant failed")
    s.add_argument("--quiet", action="store_true")
    s.set_defaults(func=cmd_sweep)

    g = sub.add_parser("gate", help="exit 1 when the candidate regressed (0 pass, 2 bad input)")
    g.add_argument("--baseline", required=True, help="run dir or results.json[:VARIANT] (default: its baseline)")
    g.add_argument("--candidate", required=True, help="run dir or results.json[:VARIANT]")
    g.add_argument("--policy", help="YAML with max_drop and per_task (default: the candidate recipe's gates)")
    g.add_argument("--junit", help="write JUnit XML here")
    g.set_defaults(func=cmd_gate)

    c = sub.add_parser("choose", help="the variant to deploy for a task, with its serve command")
    c.add_argument("run")
    c.add_argument("--task", required=True)
    c.add_argument("--max-drop", type=float, default=0.01, help="allowed absolute accuracy drop (default 0.01)")
    c.add_argument("--cuda", action="store_true", help="print the command for a CUDA machine")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_choose)

    r = sub.add_parser("report", help="re-render reports from a run's results.json")
    r.add_argument("run")
    r.set_defaults(func=cmd_report)

    d = sub.add_parser("demo", help="rebuild the shipped demo assets")
    d.add_argument("what", choices=["build-tasks", "build-model"])
    d.add_argument("--steps", type=int, default=2400)
    d.add_argument("--out")
    d.set_defaults(func=cmd_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    _offline_defaults()
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except RecipeError as exc:
        print(f"recipe error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("interrupted: finished stages are cached; re-run to continue", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
