"""What `quant sweep` prints last: the commands to run next on the run it wrote, each with the exit code it
gives on that run (worked out here by running the same decisions, never assumed)."""

from __future__ import annotations

from reports.choose import ChooseError, choose, recipe_max_drop
from reports.gate import GateInputError, load_side
from reports.gate_rules import EXIT, PASS, REGRESSION
from reports.gate_run import run_gate
from reports.table import tasks_of

BAD_INPUT = 2


def gate_outcomes(run: str, variants: list[str]) -> dict[str, tuple[int, str]]:
    """Per variant: the exit code of `quant gate` against the run's baseline, and its outcome in a word."""
    out = {}
    for name in variants:
        try:
            verdict = run_gate(run, f"{run}:{name}")
            out[name] = (EXIT[verdict.outcome], verdict.outcome)
        except GateInputError as exc:
            out[name] = (BAD_INPUT, str(exc).split(": ")[-1][:80])
    return out


def choice(results: dict, objective: str) -> tuple[int, str]:
    """The exit code of `quant choose` with this objective, and what it picks in a few words."""
    tasks = tasks_of(results)
    try:
        picks, _ = choose(results, tasks, recipe_max_drop(results, tasks), [], objective)
    except ChooseError as exc:
        return BAD_INPUT, str(exc)[:80]
    chosen: dict[str, list[str]] = {}
    for task, pick in picks.items():
        chosen.setdefault(pick.variant if pick else "nothing", []).append(task)
    said = "; ".join(f"{name} for {'every task' if len(ts) == len(tasks) else ', '.join(ts)}"
                     for name, ts in chosen.items())
    return (0 if all(picks.values()) else 1), said


def next_steps(run: str) -> list[str]:
    """The lines: gate on a variant it blocks and on one it passes, diff on the blocked one, choose by
    throughput and by memory. `run` is the run directory as the user would type it."""
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
    rows = [(f"quant gate --baseline {run} --candidate {run}:{n}",
             f"exit {gates[n][0]}: {'blocked, a regression' if n == blocked else gates[n][1]}") for n in shown]
    if blocked:
        rows.append((f"quant diff --baseline {run} --candidate {run}:{blocked}",
                     "exit 0: the items it lost, answers side by side"))
    for objective, flag in (("throughput", ""), ("memory", " --objective memory")):
        code, said = choice(results, objective)
        rows.append((f"quant choose {run}{flag}", f"exit {code}: {said}"))
    width = max(len(command) for command, _ in rows)
    return ["Next (each with the exit code it gives on this run):"] + \
           [f"  {command:<{width}}   # {comment}" for command, comment in rows]
