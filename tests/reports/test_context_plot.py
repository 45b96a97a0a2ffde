"""Accuracy against context length: the run's niah_<tokens> tasks, per variant, as a table and a plot."""

from core.results import Results
from reports.context_plot import accuracy_by_length, context_tasks, markdown_section, render_context_png
from tests.fixtures import results, variant


def _run(tasks: list) -> Results:
    scores = {"bf16": {"niah_256": 0.9, "niah_2048": 0.7, "math": 0.5},
              "kv-fp8": {"niah_256": 0.9, "niah_2048": 0.4, "math": 0.5}}
    data = results({name: variant(acc) for name, acc in scores.items()})
    data["recipe"]["tasks"] = tasks
    return Results.of(data)


def test_lengths_come_from_the_task_names_shortest_first():
    run = _run(["math", {"name": "niah_2048"}, "niah_256"])
    assert context_tasks(run) == [(256, "niah_256"), (2048, "niah_2048")]
    assert [value for _, value, _ in accuracy_by_length(run)["kv-fp8"]] == [0.9, 0.4]
    lines = markdown_section(run)
    assert lines[0] == "## Accuracy by context length"
    assert "| kv-fp8 | 0.900 [0.85, 0.95] | 0.400 [0.35, 0.45] |" in lines


def test_a_plot_only_with_two_lengths_or_more(tmp_path):
    assert render_context_png(_run(["math", "niah_256"]), tmp_path / "a.png") is None
    assert markdown_section(_run(["math", "niah_256"])) == []
    assert not (tmp_path / "a.png").exists()
    png = render_context_png(_run(["niah_256", "niah_2048"]), tmp_path / "b.png")
    assert png.read_bytes().startswith(b"\x89PNG")
