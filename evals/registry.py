"""Which tasks exist and how a recipe's task becomes an lm-eval task (facts about one task: evals.task_facts).

Tasks are lm-eval task YAMLs: every task lm-eval ships, then ours in evals/tasks, indexed after lm-eval's so
that ours win on a name clash (our `humaneval`, `mbpp` and their `_instruct` variants run generated code in
our sandbox).
"""

from __future__ import annotations

import difflib
from functools import lru_cache
from pathlib import Path
from typing import Any

from core.hashing import digest, file_digest, versions
from core.memo import remembered, source_digest
from evals import task_facts
from evals.task_facts import TASKS_DIR, TaskError, is_ours, shipped_data

# How `datasets` reads a local file, by suffix.
FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}


def task_manager(name: str | None = None):
    """An lm-eval TaskManager that knows the task `name`: one of ours alone where it is ours (indexing every
    task lm-eval ships takes seconds), else lm-eval's with ours on top."""
    if name is not None and name in _manager(defaults=False).task_index:
        return _manager(defaults=False)
    return _manager(defaults=True)


@lru_cache(maxsize=2)
def _manager(defaults: bool):
    import logging

    from lm_eval.tasks import TaskManager
    # Our tasks replace lm-eval's same-named ones on purpose ("Task 'mbpp' ... overrides existing task");
    # every other lm-eval warning reaches the user (quant/logs.py).
    logging.getLogger("lm_eval.tasks._index").setLevel(logging.ERROR)
    return TaskManager(include_path=str(TASKS_DIR), include_defaults=defaults)


def local_test_split(task_dir: Path):
    """The lm-eval `custom_dataset` of a task shipped with its data: task_dir/test.jsonl as split "test"."""
    return load_files({"test": str(shipped_data(task_dir))})


def load_files(files: dict[str, str]):
    import datasets
    return datasets.DatasetDict({split: datasets.load_dataset(_builder(path), data_files=path, split="train")
                                 for split, path in files.items()})


def _builder(path: str) -> str:
    name = Path(path).name.lower()
    for compression in (".gz", ".bz2", ".xz", ".zst"):
        name = name.removesuffix(compression)
    suffix = Path(name).suffix
    if suffix not in FILE_BUILDERS:
        raise TaskError(f"data file {path}: use one of {', '.join(FILE_BUILDERS)} (optionally compressed)")
    return FILE_BUILDERS[suffix]


def task_config(name: str) -> dict[str, Any]:
    """The registered task's full config (includes merged, `!function`s resolved)."""
    from lm_eval.tasks._yaml_loader import load_yaml

    manager = task_manager(name)
    entry = manager.task_index.get(name)
    if entry is None:
        near = difflib.get_close_matches(name, manager.all_subtasks, n=3)
        hint = f"; did you mean {', '.join(near)}?" if near else "; `lm_eval ls tasks` lists lm-eval's"
        raise TaskError(f"no task {name!r} in evals/tasks or lm-eval{hint}")
    if name not in manager.all_subtasks:
        raise TaskError(f"{name!r} is an lm-eval group or tag; name its tasks one at a time")
    if entry.yaml_path is None:
        raise TaskError(f"{name!r} is a Python-class lm-eval task; only YAML tasks take recipe options")
    return load_yaml(entry.yaml_path, resolve_func=True)


def lm_eval_spec(task) -> str | dict[str, Any]:
    """A recipe Task -> what lm-eval's TaskManager loads: the name, or the config with local data files."""
    cfg = task_config(task.name)
    if task.data_files is None:
        if (cfg.get("metadata") or {}).get("needs_data_files"):
            raise TaskError(f"{task.name} has no data of its own: give the task `data_files:`")
        return task.name
    test_split = cfg.get("test_split") or "test"
    files = {test_split: task.data_files} if isinstance(task.data_files, str) else dict(task.data_files)
    if test_split not in files:
        raise TaskError(f"{task.name} evaluates split {test_split!r}: data_files needs that key "
                        f"(have {', '.join(files)})")
    shots = task.num_fewshot if task.num_fewshot is not None else cfg.get("num_fewshot") or 0
    fixed_shots = (cfg.get("fewshot_config") or {}).get("samples") is not None
    shot_split = cfg.get("fewshot_split") or cfg.get("training_split") or cfg.get("validation_split")
    if shots and not fixed_shots and shot_split and shot_split not in files:
        raise TaskError(f"{task.name} takes {shots} few-shot examples from split {shot_split!r}: add it to "
                        f"data_files ({{{test_split}: ..., {shot_split}: ...}}) or set num_fewshot: 0")
    for split_key in ("training_split", "validation_split", "fewshot_split"):
        if cfg.get(split_key) not in files:
            cfg.pop(split_key, None)
    builders = {_builder(path) for path in files.values()}
    if len(builders) > 1:
        raise TaskError(f"{task.name}: data_files mixes formats; give every split in one format")
    cfg.pop("custom_dataset", None)
    cfg.pop("dataset_name", None)
    cfg.update(dataset_path=builders.pop(), dataset_kwargs={"data_files": files})
    return cfg


@lru_cache(maxsize=1)
def _ours_digest() -> str:
    """Our task definitions (YAML and code, not data): with lm-eval's version, all a task's resolution reads."""
    files = sorted(p for p in TASKS_DIR.rglob("*") if p.suffix in (".yaml", ".py") and "__pycache__" not in p.parts)
    return digest([(str(p.relative_to(TASKS_DIR)), file_digest(p)) for p in files])


def _task_key(task) -> tuple:
    return (task.model_dump(mode="json"), versions("lm_eval"), _ours_digest(),
            source_digest(__file__, task_facts.__file__))


def hub_dataset(task) -> tuple[str, str | None, str | None] | None:
    """(dataset id, config name, revision) of the hub dataset lm-eval will load for this task; None where the task
    brings its own data (ours, `data_files:`, a local folder or a builder such as json). What the task's config
    names is remembered per task by content, as task_problems is; whether it is a local folder is looked at now."""
    named = remembered("hub-dataset", _task_key(task), lambda: _dataset_named(task))
    if named is None:
        return None
    path, name, revision = named
    org, _, rest = path.partition("/")
    if not (org and rest) or "/" in rest or path.startswith((".", "~")) or Path(path).expanduser().exists():
        return None   # a builder name (json, csv...) or a local folder
    return path, name, revision


def _dataset_named(task) -> tuple[str, str | None, str | None] | None:
    """(dataset_path, dataset_name, revision) as the task's config names them; None for a task's own data."""
    spec = lm_eval_spec(task)
    cfg = task_config(spec) if isinstance(spec, str) else spec
    task_class = cfg.get("class")   # a Python-class task names its data on the class
    path = cfg.get("dataset_path") or getattr(task_class, "DATASET_PATH", None)
    if cfg.get("custom_dataset") is not None or not isinstance(path, str):
        return None
    name = cfg.get("dataset_name") or getattr(task_class, "DATASET_NAME", None)
    return path, name, (cfg.get("dataset_kwargs") or {}).get("revision")


def task_problems(tasks) -> list[tuple[int, str]]:
    """(index, message) for every task of a recipe that does not resolve (unknown names come with the nearest).
    Remembered per task by content: lm-eval's task index is built only for a task not resolved before."""
    found = []
    for i, task in enumerate(tasks):
        if (problem := remembered("task-problem", _task_key(task), lambda: _task_problem(task))) is not None:
            found.append((i, problem))
    return found


def _task_problem(task) -> str | None:
    try:
        lm_eval_spec(task)
    except TaskError as exc:
        return str(exc)
    return None


def code_execution(task) -> str | None:
    """Where a task runs model-generated code: "sandbox" (ours in evals/tasks, through evals/code_scoring),
    "host" (an lm-eval task marked unsafe_code: lm-eval's own executor, no isolation at all), or None.
    Remembered per task by content, as task_problems is."""
    return remembered("code-execution", _task_key(task), lambda: _code_execution(task))


def _code_execution(task) -> str | None:
    from lm_eval.tasks._yaml_loader import load_yaml

    entry = task_manager(task.name).task_index.get(task.name)
    if entry is None or entry.yaml_path is None:
        return None  # not a YAML task: task_problems says so
    path = Path(entry.yaml_path).resolve()
    if not load_yaml(path, resolve_func=False).get("unsafe_code"):
        return None
    return "sandbox" if is_ours(path) else "host"
