"""The `quant` command."""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
import threading
from pathlib import Path

from core import exit_codes
from core.recipe import RecipeError
from quant import logs

# Commands that read stored results: any failure of theirs is bad input (exit 2), never a traceback.
READERS = ("gate", "choose", "compare", "report")

SWEEP_EXIT_CODES = """exit codes:
  0    every variant ok, or declared unsupported by the engine (recorded, scored in-process)
  1    a variant failed: crash, quantization or measurement error (--allow-failed: 0); or the disk filled up
       (one line; free space and re-run: finished stages are cached)
  2    bad input, found before any work: every recipe problem listed, one line each
  130  interrupted (Ctrl-C), 143 terminated (SIGTERM): servers stopped, finished stages cached; re-run to continue"""
# A list flag takes several values after it and may be repeated: `--task a b` and `--task a --task b`.
SEVERAL = {"action": "extend", "nargs": "+"}
UNISOLATED_HELP = ("where bubblewrap is missing, run model-generated code on this host anyway (rlimits and a "
                   "private temporary directory only; also lm-eval's own code tasks)")


def fail(args, message: str) -> int:
    """Every command's error: one line, `<command> error: <what>` (a file first where one is at fault), exit 2."""
    print(f"{args.command} error: {message}", file=sys.stderr)
    return exit_codes.BAD_INPUT


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: every server and quantizer stopped, finished stages kept."""


def _on_sigterm(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)   # a second one must not cut the clean-up short
    raise Terminated()


def _library_defaults() -> None:
    # Set before the libraries import. The hub is reached as huggingface_hub reaches it: online unless the user
    # sets HF_HUB_OFFLINE / HF_DATASETS_OFFLINE.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TQDM_DISABLE", "1")  # library bars (read when tqdm is imported); we draw our own


def cmd_sweep(args) -> int:
    from core.remote import RemoteError, locate
    from quant.validate import check_file

    try:   # a bad --out is found from the command line alone, before the recipe is read
        location = locate(args.out, "runs") if args.out else None   # a directory or an fsspec URL
    except RemoteError as exc:
        return fail(args, str(exc))
    recipe, _ = check_file(args.recipe)   # every problem at once (RecipeError: exit 2), before any work
    from evals.sandbox import IsolationRequired   # the sweep's modules only for a recipe that can run
    from perf.engines.process import EngineStartError
    from quant.models import ModelNotFound
    from quant.progress import Reporter
    from quant.sweep import run_sweep

    recipe = _with_execution(recipe, args)
    location = location or locate(Path("runs") / recipe.name, "runs")
    out = location.local
    try:
        results = run_sweep(recipe, location, recipe_path=Path(args.recipe), reporter=Reporter(quiet=args.quiet),
                            cache_dir=args.cache_dir,
                            only=args.only, retry_failed=args.retry_failed,
                            allow_unisolated_code=args.allow_unisolated_code)
    except (ModelNotFound, EngineStartError, IsolationRequired, RemoteError) as exc:
        return fail(args, str(exc))
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        print(f"sweep error: {exc.filename or out}: {exc.strerror}; free space and re-run (finished stages are "
              "cached)", file=sys.stderr)
        return exit_codes.FAILED
    import sqlite3
    from quant.history import db_path, record
    print((out / "pareto.md").read_text())
    try:
        print(f"recorded as run {record(results, out, Path(args.recipe))} (quant history)")
    except (OSError, sqlite3.Error) as exc:  # the results are on disk; history is a convenience
        print(f"warning: not recorded in {db_path()}: {exc}", file=sys.stderr)
    return _sweep_exit(results, args.only, args.allow_failed)


def _with_execution(recipe, args):
    """--executor/--ray-address win over the recipe's `execution:` section."""
    overrides = {k: v for k, v in {"executor": args.executor, "ray_address": args.ray_address}.items() if v}
    if args.ray_address and not args.executor:
        overrides["executor"] = "ray"
    if not overrides:
        return recipe
    execution = recipe.execution.model_validate({**recipe.execution.model_dump(), **overrides})
    return recipe.model_copy(update={"execution": execution})


def _sweep_exit(results: dict, only: list[str] | None, allow_failed: bool) -> int:
    """Exit 1 when a variant failed, unless --allow-failed; the summary names each variant not ok, with its reason."""
    from reports.sweep_output import sweep_summary

    lines, failed = sweep_summary(results, only, allow_failed)
    print("\n".join(lines), file=sys.stderr)
    return exit_codes.FAILED if failed and not allow_failed else exit_codes.OK


def cmd_validate(args) -> int:
    from quant.validate import check_for_sweep, summary

    recipe, findings = check_for_sweep(args.recipe, args.allow_unisolated_code)   # RecipeError: exit 2
    for line in findings.warnings:
        print(f"warning: {line}", file=sys.stderr)
    for line in findings.notes:
        print(line)
    print(summary(recipe, findings))
    return exit_codes.OK


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return f"quant-suite {version('quant-suite')}"
    except PackageNotFoundError:
        return "quant-suite (version unknown: the package is not installed)"


def cmd_gate(args) -> int:
    from reports.gate import GateInputError, check_policy_tasks, compare, load_policy, load_side, outcome, pick_variant
    from reports.gate_rules import EXIT
    from reports.gate_output import as_json, format_checks, junit_xml, markdown

    try:
        base_results, base_variant = load_side(args.baseline)
        cand_results, cand_variant = load_side(args.candidate)
        baseline = pick_variant(base_results, base_variant, default_baseline=True, label="--baseline")
        candidate = pick_variant(cand_results, cand_variant, default_baseline=False, label="--candidate")
        policy, source = load_policy(Path(args.policy) if args.policy else None, base_results)
        check_policy_tasks(policy, list(baseline.get("accuracy", {})), source)
        if args.rule:
            policy = policy.model_copy(update={"rule": args.rule})
        if args.allow_foreign_load:
            policy = policy.model_copy(update={"perf": policy.perf.model_copy(update={"allow_foreign_load": True})})
        checks = compare(baseline, candidate, policy, args.allow_partial_overlap, source, args.allow_undeployable)
    except GateInputError as exc:
        return fail(args, str(exc))
    names = (baseline["name"], candidate["name"], policy.rule, source)
    print(format_checks(checks, *names))
    outputs = ((args.junit, lambda: junit_xml(checks, f"quant-gate.{candidate['name']}", source)),
               (args.markdown, lambda: markdown(checks, *names)), (args.json, lambda: as_json(checks, *names)))
    for path, render in outputs:
        if path:
            try:
                Path(path).write_text(render())
            except OSError as exc:
                return fail(args, f"{path}: cannot write ({exc.strerror})")
    return EXIT[outcome(checks)]


def cmd_choose(args) -> int:
    from core.recipe import Gates
    from reports import choose_output
    from reports.choose import ChooseError, choose, deploy_command, engine_label, parse_slo
    from reports.gate import GateInputError, load_side
    from reports.table import tasks_of

    try:
        results, _ = load_side(args.run)
        slos = [parse_slo(s) for s in args.slo]
        tasks = args.task or tasks_of(results)
        gates = Gates.model_validate(results.get("recipe", {}).get("gates") or {})   # as `quant gate` reads them
        max_drop = {t: gates.max_drop_for(t) if args.max_drop is None else args.max_drop for t in tasks}
        choices, shared = choose(results, tasks, max_drop, slos, args.objective)
    except (GateInputError, ChooseError) as exc:
        return fail(args, str(exc))
    commands = {t: deploy_command(results, c.variant) for t, c in choices.items() if c}
    render = choose_output.as_json if args.json else choose_output.as_text
    print(render(choices, shared, commands, max_drop, slos, args.objective, engine_label(results)))
    return exit_codes.OK if all(choices.values()) else exit_codes.FAILED


def cmd_report(args) -> int:
    from core.remote import RemoteError, is_url, pull_run
    from reports.render import render_all
    from reports.results_file import ResultsError, read_results

    location = None
    try:
        if is_url(args.run):   # a run published to a URL: rendered here, then published back
            location = pull_run(args.run.removesuffix("/results.json"))
        path = location.local if location else Path(args.run)
        results_path = path / "results.json" if path.is_dir() else path
        results = read_results(results_path)
    except (ResultsError, RemoteError) as exc:
        return fail(args, str(exc))
    for written in render_all(results_path.parent, results):
        if location:
            location.remote.upload_file(written, written.relative_to(location.local).as_posix())
        print(written)
    if args.screenshot:
        from reports.screenshot import NoBrowser, screenshot
        try:
            print(screenshot(results_path.parent / "report.html", results_path.parent / "report.png"))
        except (NoBrowser, OSError) as exc:
            return fail(args, f"screenshot: {exc}")
    return exit_codes.OK


def cmd_history(args) -> int:
    from quant.history import db_path, runs
    from reports.history_output import runs_table

    rows = runs(args.limit, args.recipe)
    print(runs_table(rows) if rows else f"no runs recorded yet in {db_path()}")
    return exit_codes.OK


def cmd_compare(args) -> int:
    from quant.history import compare, load_run
    from reports.history_output import deltas_table

    refs = [args.baseline, args.candidate] if args.baseline and args.candidate else args.runs
    if len(refs) != 2 or (args.baseline or args.candidate) and args.runs:
        return fail(args, "give two runs: --baseline RUN --candidate RUN (run ids, unique prefixes or run dirs)")
    try:
        baseline, candidate = load_run(refs[0]), load_run(refs[1])
    except (LookupError, OSError, ValueError) as exc:   # ResultsError is a ValueError
        return fail(args, str(exc))
    print(deltas_table(compare(baseline, candidate)))
    return exit_codes.OK


def cmd_demo(args) -> int:
    if args.what == "build-tasks":
        from demo.tasks.build import write_test_sets
        from evals.task_facts import shipped_data, task_dir
        for task, path in write_test_sets(lambda task: shipped_data(task_dir(task))).items():
            print(f"{task}: {path}")
    else:
        import torch
        from demo.train import DEMO_MODEL_DIR, build_demo_model
        torch.set_num_threads(os.cpu_count() or 1)
        build_demo_model(Path(args.out) if args.out else DEMO_MODEL_DIR, device=args.device)
    return exit_codes.OK


def cmd_sandbox_check(args) -> int:
    from evals import hostile, integrity
    from evals.sandbox import IsolationRequired, describe, permit_unisolated, require_isolation
    from reports.sandbox_output import hostile_lines, integrity_lines

    with permit_unisolated(args.allow_unisolated_code):
        try:
            require_isolation("quant sandbox-check")
        except IsolationRequired as exc:
            return fail(args, str(exc))
        print(f"sandbox: {describe()}")
        print("hostile programs (contained: scored 0 and reached nothing of the host)")
        outcomes = hostile.check()
        print("\n".join(hostile_lines(outcomes)))
        print("scoring integrity (every cheat must score 0; each control_right* 1, each control_wrong* 0)")
        verdicts = integrity.check()
        print("\n".join(integrity_lines(verdicts)))
    return exit_codes.OK if all(o.contained for o in outcomes) and all(v.correct for v in verdicts) \
        else exit_codes.FAILED


def cmd_sensitivity(args) -> int:
    from core.hashing import tree_digest
    from quant.models import resolve_model
    from quant.progress import Reporter
    from core.recipe import Sensitivity
    from quant.sensitivity_stage import ranking, write_report
    from core.store import Cache
    from quant.validate import check_file

    recipe, findings = check_file(args.recipe, engine=False)   # all problems at once (exit 2), before any work
    for line in findings.warnings:
        print(f"warning: {line}", file=sys.stderr)
    ranked = [v for v in recipe.variants if v.scheme is not None or v.weights is not None]
    try:
        variant = recipe.variant(args.variant) if args.variant else ranked[0]
    except (KeyError, IndexError) as exc:
        return fail(args, exc.args[0] if isinstance(exc, KeyError) else "no variant with a scheme or weights")
    base = variant.sensitivity or Sensitivity(keep_top=1)
    spec = base.model_copy(update={k: v for k, v in (("by", args.by), ("samples", args.samples),
                                                      ("items_per_task", args.items)) if v is not None})
    try:
        model_dir = resolve_model(recipe.model, Path(args.recipe).parent, revision=recipe.revision)
        out = Path(args.out) if args.out else Path("runs") / recipe.name / "sensitivity" / variant.name
        cache = Cache.at(args.cache_dir or Path("runs") / ".cache")
        result = ranking(cache, Reporter(), model_dir, tree_digest(model_dir), recipe, variant, spec, args.device)
    except ValueError as exc:
        return fail(args, str(exc))
    try:
        paths = write_report(result, out, variant.sensitivity)
    except ValueError as exc:   # a bits budget below what quantizing everything takes
        return fail(args, str(exc))
    print(paths[1].read_text())
    print(f"wrote {', '.join(map(str, paths))}")
    return exit_codes.OK


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="quant", description="LLM quantization accuracy and performance regression suite")
    p.add_argument("--version", action="version", version=_version())
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("sweep", help="quantize, serve, evaluate and benchmark every variant of a recipe",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=SWEEP_EXIT_CODES)
    s.add_argument("recipe")
    s.add_argument("--out", help="run directory, or an fsspec URL every node reaches (s3://, gs://, file:///...; "
                                 "default runs/<recipe name>)")
    s.add_argument("--cache-dir", help="stage cache, a directory or an fsspec URL (default: <out>/../.cache)")
    s.add_argument("--only", **SEVERAL, metavar="VARIANT", help="run only these variants")
    s.add_argument("--retry-failed", action="store_true", help="retry variants the engine rejected before or is known to refuse")
    s.add_argument("--allow-failed", action="store_true", help="exit 0 even when a variant failed")
    s.add_argument("--strict", action="store_true", help=argparse.SUPPRESS)  # the default now; kept for old scripts
    s.add_argument("--allow-unisolated-code", action="store_true", help=UNISOLATED_HELP)
    s.add_argument("--executor", choices=["local", "ray"],
                   help="where variants run: one after another here (local, the default) or fanned out on Ray")
    s.add_argument("--ray-address", metavar="ADDR",
                   help="a running Ray cluster (implies --executor ray; default: start a local one)")
    s.add_argument("--quiet", action="store_true")
    s.set_defaults(func=cmd_sweep)

    v = sub.add_parser("validate", help="every check a sweep makes before work, and no work: exit 0 ok, 2 the "
                       "problems, one line each")
    v.add_argument("recipe")
    v.add_argument("--allow-unisolated-code", action="store_true", help=UNISOLATED_HELP)
    v.set_defaults(func=cmd_validate)

    g = sub.add_parser("gate", help="0 pass, 1 regression, 2 bad input, 3 inconclusive (more items needed)")
    g.add_argument("--baseline", required=True, help="run dir or results.json[:VARIANT] (default: its baseline)")
    g.add_argument("--candidate", required=True, help="run dir or results.json[:VARIANT]")
    g.add_argument("--policy", help="YAML like a recipe's gates: section (default: the BASELINE run's recipe gates)")
    g.add_argument("--rule", choices=["point", "significant", "non-inferiority"],
                   help="override the policy's rule (default: point)")
    g.add_argument("--junit", help="write JUnit XML here (one test case per task and metric)")
    g.add_argument("--markdown", help="write a Markdown summary here (for a pull-request comment)")
    g.add_argument("--json", help="write the checks as JSON here")
    g.add_argument("--allow-partial-overlap", action="store_true",
                   help="gate on the items both sides scored when their item sets differ (default: exit 2)")
    g.add_argument("--allow-undeployable", action="store_true",
                   help="gate the accuracy of a variant recorded failed or unsupported (default: exit 2, it cannot "
                   "be deployed); every line and report says so, and perf is not gated")
    g.add_argument("--allow-foreign-load", action="store_true",
                   help="gate perf measured while other processes took CPU (default: such perf checks are "
                   "inconclusive); each check says so")
    g.set_defaults(func=cmd_gate)

    c = sub.add_parser("choose", help="the variant to deploy per task, why, and its serve command")
    c.add_argument("run")
    c.add_argument("--task", **SEVERAL, help="only these tasks (default: every task in the run)")
    c.add_argument("--slo", action="append", default=[], metavar="METRIC=LIMIT",
                   help="e.g. ttft_p99=500ms, tpot_p50=50ms, e2e_p99=2s (repeatable)")
    c.add_argument("--objective", choices=["throughput", "latency", "memory"], default="throughput")
    c.add_argument("--max-drop", type=float, help="allowed absolute accuracy drop (default: the run's recipe "
                   "gates, per task, as `quant gate` reads them)")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_choose)

    r = sub.add_parser("report", help="re-render reports from a run's results.json")
    r.add_argument("run")
    r.add_argument("--screenshot", action="store_true", help="also render report.html in headless Chromium "
                   "to report.png")
    r.set_defaults(func=cmd_report)

    h = sub.add_parser("history", help="list recorded sweeps (SQLite; $QUANT_HISTORY_DB)")
    h.add_argument("--limit", type=int, default=20)
    h.add_argument("--recipe", help="only runs of this recipe name")
    h.set_defaults(func=cmd_history)

    m = sub.add_parser("compare", help="per-task deltas, candidate minus baseline, between two recorded runs or run dirs")
    m.add_argument("--baseline", help="run id (or a unique prefix) from history, or a run dir")
    m.add_argument("--candidate", help="run id (or a unique prefix) from history, or a run dir")
    m.add_argument("runs", nargs="*", help=argparse.SUPPRESS)   # `compare A B`, as before: kept for old scripts
    m.set_defaults(func=cmd_compare)

    z = sub.add_parser("sensitivity", help="rank layers by the damage quantizing each alone does (KL, task loss)")
    z.add_argument("recipe")
    z.add_argument("--variant", help="whose weight scheme to rank under (default: the first with one)")
    z.add_argument("--by", choices=["module", "layer"], help="unit: one Linear (q/k/v and gate/up fused, as vLLM runs them) or a decoder layer "
                   "(default module)")
    z.add_argument("--samples", type=int, help="calibration texts for the KL (default 32)")
    z.add_argument("--items", type=int, help="items per task for the loss change (default 32; 0: none)")
    z.add_argument("--device", default="cpu", help="torch device, e.g. cuda")
    z.add_argument("--out", help="report directory (default runs/<recipe>/sensitivity/<variant>)")
    z.add_argument("--cache-dir", help="stage cache (default runs/.cache, the sweep's)")
    z.set_defaults(func=cmd_sensitivity)

    x = sub.add_parser("sandbox-check", help="run the hostile-program and scoring-integrity corpora; exit 1 if any "
                       "program is not contained or a cheat scores a pass")
    x.add_argument("--allow-unisolated-code", action="store_true", help=UNISOLATED_HELP)
    x.set_defaults(func=cmd_sandbox_check)
    d = sub.add_parser("demo", help="rebuild the shipped demo assets")
    d.add_argument("what", choices=["build-tasks", "build-model"])
    d.add_argument("--out")
    d.add_argument("--device", default="cpu", help="build-model on cpu (default; the shipped checkpoint) or cuda")
    d.set_defaults(func=cmd_demo)
    for command in sub.choices.values():
        logs.add_arguments(command)
    return p


def main(argv: list[str] | None = None) -> int:
    _library_defaults()
    args = build_parser().parse_args(argv)
    logs.configure(logs.level_of(args.verbosity, args.verbose))
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return args.func(args)
    except RecipeError as exc:
        return fail(args, str(exc))
    except KeyboardInterrupt as exc:
        what = "terminated" if isinstance(exc, Terminated) else "interrupted"
        print(f"{what}: finished stages are cached; re-run to continue", file=sys.stderr)
        return exit_codes.TERMINATED if isinstance(exc, Terminated) else exit_codes.INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - a reader's crash is bad input, never a verdict (exit 1)
        if args.command not in READERS:
            raise
        return fail(args, f"{args.run if hasattr(args, 'run') else 'input'}: unexpected "
                          f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")


if __name__ == "__main__":
    sys.exit(main())
