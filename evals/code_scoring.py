"""pass@1 for code tasks: assemble each program, run it in the sandbox, many at once.

lm-eval scores one document at a time. A task's filter sees every response first, so `prefetch` runs all
programs from a pool of threads (each waits on its sandboxed process) and keeps the outcomes; `passed` then
answers from them, and runs a program itself only if it was not prefetched.

An outcome is kept for the life of the process, keyed by the program's exact text and the sandbox it ran in:
the variants of a sweep mostly write the same programs (a quantized model repeats most of its baseline's
answers), and each is run once. A timeout is not kept: it can be the machine's load rather than the program's.
A program whose run raises on the host (text that cannot be written as UTF-8, say) is not kept either: `passed`
runs it again and its item fails with the reason (evals/item_errors.py), never the task.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from evals import item_errors
from evals.execute import ExecResult, run_program
from evals.sandbox import IsolationRequired, capabilities, require_isolation
from evals.scoring_names import defined_names, free_names

_known: dict[str, bool] = {}        # program and sandbox -> passed, for each program this process ran to its end
_prefetched: dict[str, bool] = {}   # the last prefetch's outcomes, timeouts too, until `passed` takes them


class Program(NamedTuple):
    """The model's code, then the tests that judge it. The tests see the prelude's names (the task's own text,
    run on its own: a prompt's helpers and imports), the builtins as they were, and of the solution only its
    entry points, whose results must be plain values (evals/scoring_names.py, evals/sandbox_harness.py)."""
    solution: str
    tests: str
    prelude: str = ""
    entry_points: tuple[str, ...] = ()
    classes: tuple[str, ...] = ()   # entry points the tests use as classes (constructed, not compared)


def humaneval_program(doc: dict, completion: str) -> Program:
    return Program(f"{doc['prompt']}{completion}\n", f"{doc['test']}\ncheck({doc['entry_point']})\n",
                   prelude=doc["prompt"], entry_points=(doc["entry_point"],))


def mbpp_program(doc: dict, completion: str) -> Program:
    """The tests call the functions (and use the classes) MBPP's reference code defines, by name; without a
    reference, whatever name the tests read that nothing else provides (evals/scoring_names.py)."""
    setup = doc.get("test_setup_code") or ""
    tests = "\n".join(doc["test_list"]) + "\n"
    read = set(free_names(tests))
    functions, classes = defined_names(doc.get("code") or "")
    return Program(f"{setup}\n{completion}\n", tests, prelude=setup,
                   entry_points=tuple(f for f in functions if f in read), classes=tuple(c for c in classes if c in read))


def run(program: Program) -> ExecResult:
    return run_program(program.solution, tests=program.tests, prelude=program.prelude,
                       entry_points=program.entry_points, classes=program.classes)


def _key(program: Program) -> str:
    return hashlib.sha256(json.dumps([*program, repr(capabilities())]).encode()).hexdigest()


def _run(key: str, program: Program) -> bool:
    result = run(program)
    if result.reason != "timeout":
        _known[key] = result.passed
    return result.passed


def workers() -> int:
    """Twice the cores: much of each run is spent waiting for the sandbox to start."""
    return max(1, min(16, 2 * len(os.sched_getaffinity(0))))


def _run_or_none(key: str, program: Program) -> bool | None:
    """None where running it raised: `passed` runs it again, on its item's behalf."""
    try:
        return _run(key, program)
    except IsolationRequired:
        raise
    except Exception:  # noqa: BLE001 - one program must not end the others' runs
        return None


def prefetch(programs: list[Program]) -> None:
    todo = {key: p for key, p in ((_key(p), p) for p in programs) if key not in _known}
    if len(todo) < 2:
        return
    with ThreadPoolExecutor(workers()) as pool:
        outcomes = zip(todo, pool.map(_run_or_none, todo, todo.values()))
        _prefetched.update((key, ok) for key, ok in outcomes if ok is not None)


def passed(program: Program) -> float:
    require_isolation("run_program")   # a kept outcome is no way around the opt-in
    key = _key(program)
    ok = _prefetched.pop(key, _known.get(key))
    return float(_run(key, program) if ok is None else ok)


def task_functions(program_of: Callable[[dict, str], Program]):
    """(prefetch, process_results) for a code task's utils.py: an lm-eval `custom` filter_fn that leaves the
    responses as they are and runs all their programs at once, and pass@1 per document."""
    def programs(resps: list[list[str]], docs: list[dict]):
        for rs, doc in zip(resps, docs):
            for r in rs:
                try:
                    yield program_of(doc, r)
                except Exception:  # noqa: BLE001 - process_results meets it again and fails that item
                    continue

    def prefetch_filter(resps: list[list[str]], docs: list[dict]) -> list[list[str]]:
        prefetch(list(programs(resps, docs)))
        return resps

    def process_results(doc: dict, results: list[str]) -> dict[str, float]:
        return {"pass@1": passed(program_of(doc, results[0]))}
    return prefetch_filter, item_errors.guarded(process_results, ("pass@1",), not_the_items=(IsolationRequired,))
