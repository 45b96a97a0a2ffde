"""Facts about a task, worked out here only: its folder, its shipped data, its size and its headline metric.
(Where a task's per-item records go in a run is the run layout's: core.run_layout.VariantLayout.items.)"""

from __future__ import annotations

from pathlib import Path

TASKS_DIR = Path(__file__).resolve().parent / "tasks"   # our lm-eval task YAMLs, one folder per task
SHIPPED_DATA = "test.jsonl"   # a task shipped with its data keeps it beside its YAML, as split "test"

# The metric a task is ranked and gated on; any other task uses its first metric under its first filter.
PRIMARY_METRIC = {"demo_code": "pass@1", "demo_math": "exact_match", "demo_extraction": "field_f1",
                  "humaneval": "pass@1", "mbpp": "pass@1", "extraction": "field_f1",
                  "humaneval_instruct": "pass@1", "mbpp_instruct": "pass@1", "math_chat": "exact_match",
                  "math_open": "exact_match", "math_dm": "exact_match", "math_dm_pot": "exact_match",
                  "extraction_json": "field_f1"}


class TaskError(ValueError):
    """A task that cannot be run as configured; the message says what to change."""


def task_dir(task: str) -> Path:
    """The folder of one of our tasks (it need not exist: lm-eval's own tasks have none here)."""
    return TASKS_DIR / task


def shipped_data(task_folder: Path | str) -> Path:
    """A task folder's own data file."""
    return Path(task_folder) / SHIPPED_DATA


def size(task: str) -> int | None:
    """Items in a task shipped with its data; None where only lm-eval knows."""
    data = shipped_data(task_dir(task))
    if not data.exists():
        return None
    with data.open() as lines:
        return sum(1 for _ in lines)


def is_ours(path: Path) -> bool:
    """Whether a task file lies under our tasks folder."""
    return TASKS_DIR in Path(path).resolve().parents


def primary_metric(task: str, metrics: list[str]) -> str:
    if task in PRIMARY_METRIC:
        return PRIMARY_METRIC[task]
    if not metrics:
        raise TaskError(f"task {task} reported no metrics")
    return metrics[0]
