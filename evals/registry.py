"""Where task definitions live and which metric is each task's headline."""

from __future__ import annotations

from pathlib import Path

TASKS_DIR = Path(__file__).resolve().parent / "tasks"

# The metric a task is ranked and gated on; any other lm-eval task uses its first metric.
PRIMARY_METRIC = {"demo_code": "pass@1", "demo_math": "exact_match", "demo_extraction": "field_f1"}


def local_test_split(task_dir: Path):
    """The lm-eval `custom_dataset` of a task shipped with its data: task_dir/test.jsonl as split "test"."""
    import datasets
    return datasets.DatasetDict({"test": datasets.load_dataset("json", data_files=str(task_dir / "test.jsonl"),
                                                               split="train")})


def shipped_tasks() -> list[str]:
    return sorted(p.parent.name for p in TASKS_DIR.glob("*/*.yaml"))


def primary_metric(task: str, metrics: list[str]) -> str:
    if task in PRIMARY_METRIC:
        return PRIMARY_METRIC[task]
    if not metrics:
        raise ValueError(f"task {task} reported no metrics")
    return metrics[0]
