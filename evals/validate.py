"""The evals stage's own check of its part of a recipe, before work: every task resolves (ours in evals/tasks,
or lm-eval's by name), the nearest names given for one that does not."""

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
