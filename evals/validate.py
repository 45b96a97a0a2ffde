"""The evals stage's own check of its part of a recipe, before work: every task resolves (ours in evals/tasks,
or lm-eval's by name), the nearest names given for one that does not; the hub dataset a resolved task loads
can be had (resolved as lm-eval's `datasets` call would, no data downloaded); a task whose data is here fits
each variant's context: its largest request (prompt and tokens to generate, as the eval will send it:
evals/prompt_fit.py) within the variant's max_model_len; and model-generated code runs only isolated, or where
the user opted in."""

from __future__ import annotations

from pathlib import Path

from core.checks import Found, Problem, as_int
from core.recipe import Task


def check(tasks: list[tuple[int, Task]], tokenizer_dir: Path | None = None,
          contexts: list[tuple[str, int, str]] = ()) -> Found:
    """tasks: (index in the recipe, task). The tasks that resolved are those whose index has no error.
    tokenizer_dir: the model's directory, where its tokenizer is here; contexts: (variant, max_model_len, where
    that is set) for each variant the engine serves."""
    from evals.registry import task_problems

    found = Found()
    unresolved = set()
    for i, message in task_problems([t for _, t in tasks]):
        found.errors.append((("tasks", tasks[i][0]), message))
        unresolved.add(i)
    resolved = [t for i, t in enumerate(tasks) if i not in unresolved]
    found.errors += _data_problems(resolved)
    if tokenizer_dir is not None and contexts:
        found.errors += _fit_problems(resolved, tokenizer_dir, contexts)
    return found


def _fit_problems(tasks: list[tuple[int, Task]], tokenizer_dir: Path,
                  contexts: list[tuple[str, int, str]]) -> list[Problem]:
    """One line per task and variant whose largest request does not fit the variant's max_model_len: vLLM
    refuses a prompt over it, and a prompt that leaves no room for the answer cannot be scored. Only tasks
    whose data is here: a hub task's data is not fetched before work (the eval says so per item)."""
    from evals.prompt_fit import longest_request
    from evals.registry import hub_dataset

    found = []
    for i, task in tasks:
        if hub_dataset(task) is not None or (longest := longest_request(task, tokenizer_dir)) is None:
            continue
        tokens, budget = longest["tokens"], longest["budget"]
        size = (f"{tokens} tokens + {budget} to generate = {tokens + budget}" if longest["kind"] == "generate_until"
                else f"{tokens} tokens (context and continuation, scored whole)")
        asked = as_int((task.gen_kwargs or {}).get("max_gen_toks"))
        for variant, limit, where in contexts:
            # the recipe's max_gen_toks that alone fills the context is its own line (generation_problems)
            if tokens + budget > limit and not (asked is not None and asked >= limit):
                found.append((("tasks", i), f"{task.key}: its longest prompt is {size}, over variant {variant}'s "
                              f"max_model_len {limit} ({where}): raise max_model_len, or drop the task or "
                              "shorten its prompts"))
    return found


def _data_problems(tasks: list[tuple[int, Task]]) -> list[Problem]:
    """A task whose hub dataset cannot be had (an unknown id, a gated one without a token, offline and not
    cached)."""
    from core.hub import dataset_problem
    from evals.registry import hub_dataset

    found = []
    for i, task in tasks:
        source = hub_dataset(task)
        if source is not None and (problem := dataset_problem(*source)) is not None:
            found.append((("tasks", i), f"{task.name}: {problem}"))
    return found


def isolation_problem(tasks: list[Task], permitted: bool) -> str | None:
    """Why a task's generated code cannot run here (no isolation, and `permitted` false), else None."""
    from evals.sandbox import IsolationRequired, permit_unisolated

    with permit_unisolated(permitted):
        try:
            check_code_isolation(tasks)
        except IsolationRequired as exc:
            return str(exc)
    return None


def check_code_isolation(tasks: list[Task]) -> dict[str, str]:
    """Before any work: IsolationRequired if a task would run generated code without isolation and the user
    did not opt in (evals.sandbox.permit_unisolated). -> {task name: "sandbox" or "host"} for code tasks."""
    from evals.registry import code_execution
    from evals.sandbox import IsolationRequired, require_isolation, unisolated_permitted

    found = {task.name: where for task in tasks if (where := code_execution(task))}
    for name, where in found.items():
        if where == "sandbox":
            require_isolation(f"task {name}")
        elif not unisolated_permitted():
            raise IsolationRequired(
                f"task {name} runs model-generated code through lm-eval's own executor, on this host "
                "without isolation: opt in with --allow-unisolated-code or the recipe's "
                "`allow_unisolated_code: true`, or use a task that runs in the sandbox (evals/tasks)")
    return found
