"""The evals stage's own check of its part of a recipe, before work: every task resolves (ours in evals/tasks,
or lm-eval's by name), the nearest names given for one that does not; and model-generated code runs only
isolated, or where the user opted in."""

from __future__ import annotations

from core.checks import Found
from core.recipe import Task


def check(tasks: list[tuple[int, Task]]) -> Found:
    """tasks: (index in the recipe, task). The tasks that resolved are those whose index has no error."""
    from evals.registry import task_problems

    found = Found()
    for i, message in task_problems([t for _, t in tasks]):
        found.errors.append((("tasks", tasks[i][0]), message))
    return found


def isolation_problem(tasks: list[Task], permitted: bool) -> str | None:
    """Why a task's generated code cannot run here (no isolation, and `permitted` false), else None."""
    from evals.registry import check_code_isolation
    from evals.sandbox import IsolationRequired, permit_unisolated

    with permit_unisolated(permitted):
        try:
            check_code_isolation(tasks)
        except IsolationRequired as exc:
            return str(exc)
    return None
