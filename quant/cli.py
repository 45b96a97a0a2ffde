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
from core.foreign_text import CleanStream, clean_text
from core.recipe import RecipeError
from quant import cli_parser, logs
from quant.cli_parser import STDOUT

# Commands that read stored results: any failure of theirs is bad input (exit 2), never a traceback.
READERS = ("gate", "diff", "choose", "compare", "report", "export")

def _write(path: str, text: str) -> str | None:
    """An output flag's value: a file, or `-` for stdout. The error line where the file cannot be written."""
    if path == STDOUT:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return None
    try:
        Path(path).write_text(text)
    except OSError as exc:
        return f"{path}: cannot write ({exc.strerror})"
    return None


def fail(args, message: str) -> int:
    """Every command's error: one line, `<command> error: <what>` (a file first where one is at fault), exit 2."""
    print(f"{args.command} error: {clean_text(message)}", file=sys.stderr)
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
    from quant.validate import Trust, check_file

    try:   # a bad --out is found from the command line alone, before the recipe is read
        location = locate(args.out, "runs") if args.out else None   # a directory or an fsspec URL
    except RemoteError as exc:
        return fail(args, str(exc))
    trust = Trust(run_recipe=True, remote_code=args.trust_remote_code)   # a sweep runs the recipe's engine
    recipe, _ = check_file(args.recipe, trust=trust)   # every problem at once (RecipeError: exit 2), before any work
    from evals.sandbox import IsolationRequired   # the sweep's modules only for a recipe that can run
    from core.provenance import TrustError
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
                            allow_unisolated_code=args.allow_unisolated_code, device=args.device,
                            allow_long_cpu_eval=args.allow_long_cpu_eval, replace_run=args.replace_run,
                            trust_remote_code=args.trust_remote_code)
    except (ModelNotFound, EngineStartError, IsolationRequired, RemoteError, TrustError) as exc:
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
    if not location.remote:
        from reports.next_steps import next_steps
        for line in next_steps(args.out or str(Path("runs") / recipe.name), out):
            print(line)
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
    """Exit 1 when a variant failed (unless --allow-failed), or when the baseline or every variant could not be
    served; the summary says which, and names each variant not ok, with its reason."""
    from reports.sweep_output import sweep_summary

    lines, failed = sweep_summary(results, only, allow_failed)
    print("\n".join(lines), file=sys.stderr)
    return exit_codes.FAILED if failed else exit_codes.OK


def cmd_validate(args) -> int:
    from quant.validate import Trust, check_for_sweep, summary

    trust = Trust(run_recipe=args.trust_recipe, remote_code=args.trust_recipe)
    recipe, findings = check_for_sweep(args.recipe, args.allow_unisolated_code, trust)   # RecipeError: exit 2
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
    from reports import gate_run_output as render
    from reports.gate import GateInputError
    from reports.gate_rules import EXIT
    from reports.gate_run import run_gate

    history = None
    if args.perf_history is not None:
        from quant.history import earlier_perf
        history = (earlier_perf, args.perf_history)
    try:
        run = run_gate(args.baseline, args.candidate, args.policy, args.rule, args.allow_partial_overlap,
                       args.allow_undeployable, args.allow_foreign_load, history)
    except GateInputError as exc:
        return fail(args, str(exc))
    outputs = ((args.junit, render.as_junit), (args.markdown, render.as_markdown), (args.json, render.as_json))
    print(render.as_text(run), file=sys.stderr if STDOUT in (args.junit, args.markdown, args.json) else sys.stdout)
    for path, write in outputs:
        if path and (error := _write(path, write(run))):
            return fail(args, error)
    return EXIT[run.outcome]


def cmd_diff(args) -> int:
    from reports import flips_output
    from reports.flips import diff_sides
    from reports.gate import GateInputError

    try:
        baseline, candidate, found = diff_sides(args.baseline, args.candidate, args.task)
    except GateInputError as exc:
        return fail(args, str(exc))
    text = clean_text(flips_output.as_text(found, baseline, candidate))   # model answers: no escape sequences
    print(text, file=sys.stderr if args.json == STDOUT else sys.stdout)
    if args.json and (error := _write(args.json, flips_output.as_json(found, baseline, candidate))):
        return fail(args, error)
    return exit_codes.OK


def cmd_choose(args) -> int:
    from reports import choose_output
    from reports.choose import (ChooseError, choose, deploy_command, engine_label, export_command, parse_slo,
                                recipe_max_drop)
    from core.results import Results
    from reports.gate import GateInputError, load_side
    from reports.summary import blocked_variants, gate_lines
    from reports.table import tasks_of

    try:
        results, _ = load_side(args.run)
        slos = [parse_slo(s) for s in args.slo]
        tasks = args.task or tasks_of(results)
        max_drop = recipe_max_drop(results, tasks, args.max_drop)
        _, gates = gate_lines(Results.of(results), results.get("_run_dir"))
        choices, shared = choose(results, tasks, max_drop, slos, args.objective, blocked_variants(gates),
                                 args.exclude_blocked)
    except (GateInputError, ChooseError) as exc:
        return fail(args, str(exc))
    commands = {t: deploy_command(results, c.variant) for t, c in choices.items() if c}
    exports = {t: export_command(args.run, c.variant) for t, c in choices.items() if c}
    shown = (choices, shared, commands, max_drop, slos, args.objective, engine_label(results), exports)
    print(choose_output.as_text(*shown), file=sys.stderr if args.json == STDOUT else sys.stdout)
    if args.json and (error := _write(args.json, choose_output.as_json(*shown))):
        return fail(args, error)
    return exit_codes.OK if all(choices.values()) else exit_codes.FAILED


def cmd_export(args) -> int:
    from quant.export import ExportError, export, summary
    from core.hub import HubError
    from quant.hub_push import check_push, push_folder

    try:
        if args.push_to_hub:
            check_push(args.push_to_hub)   # before any work: a push that cannot be made is bad input
    except HubError as exc:
        return fail(args, str(exc))
    try:
        done = export(args.run, Path(args.dir), _version(), force=args.force,
                      allow_undeployable=args.allow_undeployable, policy=args.policy, push_repo=args.push_to_hub)
    except ExportError as exc:
        print(f"export error: {exc}", file=sys.stderr)
        return exc.exit_code
    print("\n".join(summary(done)))
    if args.push_to_hub:
        try:
            pushed = push_folder(done.folder, args.push_to_hub, private=not args.public)
        except HubError as exc:
            print(f"export error: push: {exc} (the folder is written: {done.folder})", file=sys.stderr)
            return exit_codes.FAILED
        print(f"pushed to {pushed.url} (commit {pushed.commit[:12]})" if pushed.changed else
              f"{pushed.url} already holds this folder (commit {pushed.commit[:12]}): nothing pushed")
    return exit_codes.OK


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
    from quant.history import write_perf_history
    write_perf_history(results_path.parent, results)
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
    from quant.history import db_path, perf_over_time, runs
    from reports.history_output import perf_table, runs_table

    if args.variant:
        rows = perf_over_time(args.variant, args.recipe)[-args.limit:]
        print(perf_table(args.variant, rows) if rows else f"no recorded run of {args.variant} has perf in {db_path()}")
        return exit_codes.OK
    rows = runs(args.limit, args.recipe)
    print(runs_table(rows) if rows else f"no runs recorded yet in {db_path()}")
    return exit_codes.OK


def cmd_compare(args) -> int:
    from quant.history import load_side
    from reports.compare_sides import compare_sides
    from reports.gate import GateInputError
    from reports.history_output import deltas_json, deltas_table

    refs = [args.baseline, args.candidate] if args.baseline and args.candidate else args.runs
    if len(refs) != 2 or (args.baseline or args.candidate) and args.runs:
        return fail(args, "give two runs: --baseline RUN[:VARIANT] --candidate RUN[:VARIANT] (run ids, unique "
                          "prefixes, run dirs, lm-eval output directories or URLs)")
    try:
        (base, base_variant), (cand, cand_variant) = load_side(refs[0]), load_side(refs[1])
        rows = compare_sides(base, base_variant, cand, cand_variant)
    except (LookupError, OSError, ValueError, GateInputError) as exc:   # ResultsError is a ValueError
        return fail(args, str(exc))
    print(deltas_table(rows), file=sys.stderr if args.json == STDOUT else sys.stdout)
    if args.json and (error := _write(args.json, deltas_json(rows))):
        return fail(args, error)
    return exit_codes.OK


def cmd_demo(args) -> int:
    if args.what == "build-tasks":
        from demo.tasks.build import write_test_sets
        from evals.task_facts import shipped_data, task_dir
        for task, path in write_test_sets(lambda task: shipped_data(task_dir(task))).items():
            print(f"{task}: {path}")
    elif args.what == "build-outliers":
        from demo.outliers import build_outlier_model, stats_lines
        from demo import DEMO_OUTLIERS_DIR
        stats = build_outlier_model(out=Path(args.out) if args.out else DEMO_OUTLIERS_DIR)
        print("\n".join(stats_lines(stats)))
    else:
        import torch
        from demo.train import DEMO_MODEL_DIR, build_demo_model
        torch.set_num_threads(os.cpu_count() or 1)
        build_demo_model(Path(args.out) if args.out else DEMO_MODEL_DIR, device=args.device)
    return exit_codes.OK


def cmd_doctor(args) -> int:
    from quant.doctor import doctor

    return doctor(args.recipe, args.cache_dir, trust_recipe=args.trust_recipe)   # a bad recipe: RecipeError, every problem, exit 2


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


HANDLERS = {"sweep": cmd_sweep, "validate": cmd_validate, "gate": cmd_gate, "diff": cmd_diff, "choose": cmd_choose, "export": cmd_export,
            "report": cmd_report,
            "history": cmd_history, "compare": cmd_compare, "sensitivity": cmd_sensitivity,
            "sandbox-check": cmd_sandbox_check, "demo": cmd_demo, "doctor": cmd_doctor}


def build_parser() -> argparse.ArgumentParser:
    return cli_parser.build(HANDLERS, _version())


def main(argv: list[str] | None = None) -> int:
    """Every line the command writes to stdout and stderr (its own, its log's, a library's warning) goes through
    core/foreign_text.clean_text: names and text from elsewhere never reach the terminal as control characters."""
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = CleanStream(sys.stdout), CleanStream(sys.stderr)
    try:
        return _main(argv)
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        sys.stdout, sys.stderr = streams


def _main(argv: list[str] | None) -> int:
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
