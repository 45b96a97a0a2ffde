"""The generative real-data tasks math_open, math_dm and extraction_json: their answers are read as SymPy values without
running anything the model wrote, compared by value as SymPy holds them equal; their shipped items are what
their builders make, with gold fields each item's own text gives."""

from __future__ import annotations

import importlib.util
import json
import re

import pytest

from evals.extraction_scoring import score
from evals.registry import TASKS_DIR
from evals.sympy_values import Unreadable, read_value, same


def _module(task: str, name: str):
    spec = importlib.util.spec_from_file_location(f"{task}_{name}", TASKS_DIR / task / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _items(task: str) -> list[dict]:
    return [json.loads(line) for line in (TASKS_DIR / task / "test.jsonl").read_text().splitlines()]


# --- math_open ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("response, answer", [
    ("The maximum is at x = 1.\nThe final answer is 6", "6"),
    ("The answer is: 6", "6"),
    ("The answer is: `9*x**2 + 6*x + 1`.", "9*x**2 + 6*x + 1"),
    ("Expanding:\nThe answer is:\n```python\n1 + 6*x + 9*x**2\n```", "1 + 6*x + 9*x**2"),
    ("The answer is $x/2$ and the answer is: **{2: 4, 5: 3}**", "{2: 4, 5: 3}"),   # the last marker
    ("No marker here, the value is\n\n`sin(3)`", "sin(3)"),                          # the last line
])
def test_the_final_answer_is_read_after_the_last_marker(response, answer):
    assert _module("math_open", "utils").final_answer(response) == answer


@pytest.mark.parametrize("answer, gold, equal", [
    ("1 + 6*x + 9*x**2", "9*x**2 + 6*x + 1", True),      # order of terms
    ("(3*x + 1)**2", "9*x**2 + 6*x + 1", False),         # the unexpanded form is not the expansion
    ("0.5", "1/2", True), ("2/4", "1/2", True), ("0.51", "1/2", False),
    ("{y, x}", "{x, y}", True), ("[1, 9]", "(1, 9)", False), ("{5: 3, 2: 4}", "{2: 4, 5: 3}", True),
    ("Interval(0, 2)", "Interval(0, 2)", True), ("Interval.open(0, 2)", "Interval(0, 2)", None),
    ("sqrt(2)/2", "1/sqrt(2)", True), ("S.Reals", "Reals", True), ("-oo", "-oo", True),
])
def test_answers_are_compared_by_value_as_sympy_holds_them_equal(answer, gold, equal):
    if equal is None:
        with pytest.raises(Unreadable):
            read_value(answer)
    else:
        assert same(read_value(answer), read_value(gold)) is equal


@pytest.mark.parametrize("answer", [
    '__import__("os").system("touch /tmp/pwned")', "x.__class__", "(lambda: 1)()", "[i for i in range(9)]",
    "sympify('1')", "Symbol('x')", "10**10**10", "2**(10**6)", "factorial(10**100)",
    "binomial(10**6, 5*10**5)", "((10**399)**10000)**10000", "1" * 500, "x" * 3000,
    "(" * 300 + "1" + ")" * 300, "1 +", "", "open('/etc/passwd')", "init_printing()", "pi(2)",
])
def test_anything_but_a_value_is_unreadable_and_nothing_runs(answer):
    with pytest.raises(Unreadable):
        read_value(answer)


def test_building_a_value_stops_at_its_time_budget(monkeypatch):
    import evals.sympy_values as values

    assert values.read_value("[1, 2]") == [1, 2]
    monkeypatch.setattr(values, "MAX_SECONDS", -1.0)
    with pytest.raises(Unreadable, match="to build"):
        values.read_value("[1, 2]")


def test_math_open_scores_a_right_a_wrong_and_an_unreadable_answer():
    utils = _module("math_open", "utils")
    doc = {"answer": "9*x**2 + 6*x + 1"}
    assert [utils.process_results(doc, [r])["exact_match"] for r in (
        "The answer is: 1 + 6*x + 9*x**2", "The answer is: (3*x + 1)**2", "The answer is: print('hi')")] == [1, 0, 0]


def test_math_open_items_are_math_mcs_with_answers_that_read():
    """All of them (409 of math_mc's 415: its builder rebuilds the file exactly), each answer read as itself."""
    items, build = _items("math_open"), _module("math_open", "build")
    assert items == build.build()
    mc = {i["id"]: i for i in _items("math_mc")}
    assert len(items) == 409 and len({i["id"] for i in items}) == 409
    for item in items[::20]:
        assert item["answer"] == mc[item["id"]]["choices"][mc[item["id"]]["label"]]
        assert item["prompt"] == mc[item["id"]]["prompt"]


# --- math_dm -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("response, score", [
    ("-4 + 7 = 3\nSo the answer is $\\boxed{3}$.", 1), ("\\[\n\\boxed{3.0}\n\\]", 1),
    ("First \\boxed{4}, no: \\boxed{3}", 1),                   # the last box
    ("Solving for a: \\boxed{a = 3}", 1), ("The answer is: 3", 1),   # no box: math_open's reading
    ("\\boxed{4}", 0), ("\\boxed{-3}", 0), ("\\boxed{three}", 0), ("\\boxed{3", 0), ("", 0),
    ("\\boxed{1, 2}", 0), ("\\boxed{6/2}", 0), ("\\boxed{2 \\times 3/2}", 0),   # not written as a number
    ("\\boxed{" + "(" * 300 + "3" + ")" * 300 + "}", 0),
])
def test_math_dm_scores_right_wrong_and_unreadable_answers_by_value(response, score):
    assert _module("math_dm", "utils").process_results({"answer": "3"}, [response]) == {"exact_match": score}


@pytest.mark.parametrize("response, answer, score", [
    ("\\boxed{3,842,142,241}", "3842142241", 1),            # thousands separators
    ("\\boxed{1,2}", "12", 0),                              # not a thousands separator
    ("\\boxed{\\frac{-3}{7}}", "-3/7", 1), ("\\boxed{-\\dfrac{3}{7}}", "-3/7", 1),
    ("\\boxed{-3/7}", "-3/7", 1), ("\\boxed{-6/14}", "-3/7", 0),   # a fraction in lowest terms, as generated
    ("\\boxed{-0.428571}", "-3/7", 0),                      # rounded is not the fraction
    ("\\boxed{-114/-6}", "19", 0),                          # the question restated
    ("\\boxed{0.50}", "1/2", 1), ("\\boxed{20.62}", "20.62", 1), ("\\boxed{20.6}", "20.62", 0),
])
def test_math_dm_compares_numbers_as_values_not_as_text(response, answer, score):
    assert _module("math_dm", "utils").process_results({"answer": answer}, [response])["exact_match"] == score


def test_math_dm_items_are_the_generators_file():
    """The shipped file is the one build.py wrote (its sha256 and size in the README), each answer one number."""
    from hashlib import sha256

    data = (TASKS_DIR / "math_dm" / "test.jsonl").read_bytes()
    readme = (TASKS_DIR / "math_dm" / "README.md").read_text()
    assert f"sha256 {sha256(data).hexdigest()}" in readme and f"{len(data):,} bytes" in readme
    items, build = _items("math_dm"), _module("math_dm", "build")
    assert len(items) == len({i["id"] for i in items}) == 420
    assert {(i["module"], i["level"]) for i in items} == {(m, lv) for m in build.MODULES for lv in build.LEVELS}
    assert {(i["mathematics_dataset"], i["sympy"], i["numpy"]) for i in items} == {("1.0.1", "1.14.0", "2.4.6")}
    for item in items:
        assert build.NUMBER.fullmatch(item["answer"]) and read_value(item["answer"]).is_Number
    first = [(i["module"], i["level"]) for i in items[:42]]
    assert len(set(first)) == 42   # the first items cover every module and level once


# --- extraction_json -------------------------------------------------------------------------------------

def test_extraction_json_gold_fields_are_in_each_entry():
    items = _items("extraction_json")
    assert len(items) == 156 and len({i["id"] for i in items}) == 156
    for item in items:
        text, gold = item["text"], item["gold"]
        assert str(gold["year"]) in text and gold["first_author_surname"] in text
        assert gold["title"] in " ".join(text.replace("{", "").replace("}", "").split())
        assert len(text) <= 1200


def test_extraction_json_builder_reads_entries_as_written():
    build = _module("extraction_json", "build")
    readme = ("### Citation\n```\n@inproceedings{zellers2019hellaswag,\n  title={{H}ella{S}wag: Can a Machine "
              "Really Finish Your Sentence?},\n  author={Zellers, Rowan and Holtzman, Ari},\n  year={2019}\n}\n"
              "@misc{x, title = \"A $\\alpha$ title\", author = \"Ann Lee\", year = 2020}\n```\n")
    (first, fields), (_, second) = build.entries(readme)
    assert first.startswith("@inproceedings{zellers2019hellaswag") and first.endswith("}")
    assert build.gold(fields) == {"title": "HellaSwag: Can a Machine Really Finish Your Sentence?", "year": 2019,
                                  "first_author_surname": "Zellers"}
    assert second["author"] == "Ann Lee" and build.gold(second) is None   # LaTeX math in the title: left out


GOLD = {"title": "Are We Done with MMLU?", "year": 2025, "first_author_surname": "Gema"}
DOC = {"text": "@misc{...}", "gold": GOLD, "schema": _module("extraction_json", "build").SCHEMA}


@pytest.mark.parametrize("answer, f1, valid", [
    (json.dumps(GOLD), 1.0, 1.0),
    ('```json\n{"title": "Are We Done with MMLU?", "year": "2025", "first_author_surname": "Gema"}\n```', 2 / 3, 1.0),
    ('{"title": "Are We Done with MMLU?", "year": 2025, "first_author_surname": "Gema", "venue": "arXiv"}',
     2 * 0.75 * 1 / 1.75, 1.0),                                      # an extra field costs precision
    ('{"title": "Are We Done with MMLU?", "year": 2025,', 0.0, 0.0),  # cut off: no object
    ("{'title': 'Are We Done with MMLU?'}", 0.0, 0.0),                # Python, not JSON
    ('{"title": "Are We Done with MMLU?", "year": 2025, "first_author_surname": "Gema"', 0.0, 0.0),
])
def test_extraction_json_field_f1_on_partial_and_malformed_answers(answer, f1, valid):
    scores = score(DOC, answer)
    assert scores["field_f1"] == pytest.approx(f1) and scores["json_valid"] == valid
    assert scores["schema_valid"] == float(valid == 1.0 and '"2025"' not in answer)


@pytest.mark.parametrize("task, metric", [("math_open", "exact_match"), ("math_dm", "exact_match"),
                                          ("extraction_json", "field_f1")])
def test_the_tasks_score_their_gold_answers_through_lm_eval(task, metric):
    """Each prompt answered with its own item's gold (in a chat model's words): every item scores 1."""
    from core.recipe import Task
    from evals.runner import evaluate_task
    from tests.evals.test_item_errors import TableLM

    items = _items(task)[:5]
    if task == "math_open":
        answers = {i["prompt"]: f"Working it out.\nThe answer is: `{i['answer']}`" for i in items}
    elif task == "math_dm":
        answers = {i["question"]: f"Step by step.\nSo the answer is $\\boxed{{{i['answer']}}}$." for i in items}
    else:
        answers = {i["text"]: f"```json\n{json.dumps(i['gold'], indent=2)}\n```" for i in items}
    summary, samples = evaluate_task(TableLM(answers), Task(name=task, limit=5, apply_chat_template=False))
    assert summary["primary"] == metric and summary[metric]["value"] == 1.0 and summary[metric]["n"] == 5
