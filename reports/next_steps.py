"""What `quant sweep` prints last: the commands to run next on the run it wrote, each with the exit code it
gives on that run (worked out here by running the same decisions, never assumed). Decided when the reports are
rendered (next-steps.json in the run directory), so an unchanged re-run imports no statistics to print them."""

from __future__ import annotations

import json
from pathlib import Path

from core.exit_codes import BAD_INPUT, FAILED, OK
from core.store import write_json

NEXT_STEPS = "next-steps.json"   # in the run directory, written with the reports
RUN = "{run}"


def gate_outcomes(run: str, variants: list[str]) -> dict[str, tuple[int, str]]:
    """Per variant: the exit code of `quant gate` against the run's baseline, and its outcome in a word."""
    from reports.gate import GateInputError
    from reports.gate_rules import EXIT
    from reports.gate_run import run_gate

    out = {}
    for name in variants:
        try:
            verdict = run_gate(run, f"{run}:{name}")
            out[name] = (EXIT[verdict.outcome], verdict.outcome)
        except GateInputError as exc:
            out[name] = (BAD_INPUT, str(exc).split(": ")[-1][:80])
    return out


def choice(results: dict, objective: str, blocked: dict[str, str] | None = None) -> tuple[int, str]:
    """The exit code of `quant choose` with this objective, and what it picks in a few words (a pick the gate
    blocks, `blocked`, named as such, as `quant choose` names it)."""
    from reports.choose import ChooseError, choose, recipe_max_drop
    from reports.table import tasks_of

    tasks = tasks_of(results)
    try:
        picks, _ = choose(results, tasks, recipe_max_drop(results, tasks), [], objective, blocked)
    except ChooseError as exc:
        return BAD_INPUT, str(exc)[:80]
    chosen: dict[str, list[str]] = {}
    for task, pick in picks.items():
        chosen.setdefault(pick.variant if pick else "nothing", []).append(task)
    blocked = blocked or {}
    said = "; ".join(f"{name}{' (blocked by the gate)' if name in blocked else ''} for "
                     f"{'every task' if len(ts) == len(tasks) else ', '.join(ts)}"
                     for name, ts in chosen.items())
    return (OK if all(picks.values()) else FAILED), said


def decided(run_dir: Path) -> list[dict]:
    """The rows: gate on a variant it blocks and on one it passes, diff on the blocked one, choose by throughput
    and by memory; each command's arguments (RUN where the run directory goes), its exit code and a comment."""
    from reports.gate import GateInputError, load_side
    from reports.gate_rules import PASS, REGRESSION

    run = str(run_dir)
    try:
        results, _ = load_side(run)
    except GateInputError:
        return []
    variants = [n for n in results["variants"] if n != results["baseline"]]
    if not variants:
        return []
    gates = gate_outcomes(run, variants)
    blocked = next((n for n in variants if gates[n][1] == REGRESSION), None)
    passed = next((n for n in variants if gates[n][1] == PASS), None)
    shown = [n for n in (blocked, passed) if n] or variants[:1]
    rows = [{"args": ["gate", "--baseline", RUN, "--candidate", f"{RUN}:{n}"], "exit": gates[n][0],
             "comment": "blocked, a regression" if n == blocked else gates[n][1]} for n in shown]
    if blocked:
        rows.append({"args": ["diff", "--baseline", RUN, "--candidate", f"{RUN}:{blocked}"], "exit": OK,
                     "comment": "the items it lost, answers side by side"})
    for objective, flag in (("throughput", []), ("memory", ["--objective", "memory"])):
        code, said = choice(results, objective, {n: gates[n][1] for n in variants if gates[n][1] == REGRESSION})
        rows.append({"args": ["choose", RUN, *flag], "exit": code, "comment": said})
    return rows


def write_next_steps(run_dir: Path) -> Path:
    """Decide the rows once, when the reports are rendered: an unchanged re-run only reads them."""
    path = Path(run_dir) / NEXT_STEPS
    write_json(path, decided(Path(run_dir)))
    return path


def next_steps(shown: str, run_dir: Path | None = None) -> list[str]:
    """The lines, with the run directory as the user would type it (`shown`; `run_dir` where it lies, if
    elsewhere); none where no rows were written."""
    try:
        rows = json.loads((Path(run_dir or shown) / NEXT_STEPS).read_text())
    except (OSError, ValueError):
        return []
    commands = [" ".join(["quant", *(a.replace(RUN, shown) for a in row["args"])]) for row in rows]
    if not commands:
        return []
    width = max(map(len, commands))
    return ["Next (each with the exit code it gives on this run):"] + \
           [f"  {command:<{width}}   # exit {row['exit']}: {row['comment']}" for command, row in zip(commands, rows)]
