"""math_dm_pot: the body the model writes for `solution()` runs in the sandbox and the value it returns is compared
with the generator's answer, up to a double's rounding."""

from __future__ import annotations

import importlib.util

import pytest

from evals import code_scoring
from evals.registry import TASKS_DIR
from evals.sandbox import permit_unisolated

spec = importlib.util.spec_from_file_location("math_dm_pot_utils", TASKS_DIR / "math_dm_pot" / "utils.py")
utils = importlib.util.module_from_spec(spec)
spec.loader.exec_module(utils)


def _score(answer: str, response: str) -> float:
    with permit_unisolated(True):
        return utils.process_results({"answer": answer}, [response])["exact_match"]


def _returns(value: str) -> str:
    """An answer as the model gives it: the body of the header's `solution()`, then the closing fence."""
    return f"    return {value}\n```\nIt returns the answer."


@pytest.mark.parametrize("answer, returned, score", [
    ("6", "6", 1), ("6", "6.0", 1), ("6", "2 * 3", 1), ("6", "'6'", 1), ("6", "7", 0), ("-6", "6", 0),
    ("-3/7", "Fraction(-3, 7)", 1), ("-3/7", "-3 / 7", 1),          # a float: equal up to its own rounding
    ("-3/7", "-0.428571", 0), ("-3/7", "Fraction(-6, 14)", 1),     # rounded is not the fraction; a value is
    ("-0.318", "Fraction(-0.318)", 1), ("1/3", "Fraction(1 / 3)", 1),   # a Fraction made from a float
    ("0.4", "0.1 + 0.3", 1), ("0.4", "0.4001", 0), ("20.62", "20.6", 0),
    ("3842142241", "3842142241.0", 1), ("3842142241", "3842142242.0", 0),
    ("6", "[6]", 0), ("6", "(Fraction(6), 6.0)", 0), ("6", "None", 0), ("6", "float('nan')", 0), ("6", "True", 0), ("1", "True", 0),
])
def test_the_returned_value_is_compared_by_value(answer, returned, score):
    assert _score(answer, _returns(returned)) == score


@pytest.mark.parametrize("response", [
    "    return 6 +\n",                                  # not Python
    "    print(6)\n",                                    # prints, returns None
    "    raise ValueError(6)\n",
    "    while True:\n        pass\n",                   # runs out of time
    "    return " + "(" * 3000 + "6" + ")" * 3000 + "\n",  # too deep for the parser
    "    return 6  # \udcff\n",                          # text that cannot be written as UTF-8
])
def test_answers_that_do_not_return_the_value_score_zero(monkeypatch, response):
    monkeypatch.setattr(code_scoring, "_known", {})
    assert _score("6", response) == 0


def test_the_answer_continues_the_opened_block_up_to_its_closing_fence():
    program = utils.program({"answer": "6"}, "    return 6\n```\n\n```python\nsolution = 7\n```")
    assert program.solution.startswith(utils.HEADER + "    return 6\n") and "solution = 7" not in program.solution
    assert program.entry_points == ("answer_text",)


def test_an_answer_that_closes_the_opened_block_at_once_is_scored_on_its_own_block():
    response = "```\n\n```python\nimport math\n\ndef solution():\n    return math.gcd(12, 18)\n```"
    assert _score("6", response) == 1 and _score("7", response) == 0


def test_the_questions_are_math_dms():
    assert (TASKS_DIR / "math_dm_pot" / "test.jsonl").read_bytes() == (TASKS_DIR / "math_dm" / "test.jsonl").read_bytes()


def test_every_item_scores_one_through_lm_eval_when_it_returns_its_own_answer():
    import json

    from core.recipe import Task
    from evals.runner import evaluate_task
    from tests.evals.test_item_errors import TableLM

    items = [json.loads(line) for line in (TASKS_DIR / "math_dm" / "test.jsonl").read_text().splitlines()[:5]]
    answers = {i["question"]: _returns(f"Fraction({i['answer']!r})") for i in items}
    with permit_unisolated(True):
        summary, _ = evaluate_task(TableLM(answers), Task(name="math_dm_pot", limit=5, apply_chat_template=False))
    assert summary["primary"] == "exact_match" and summary["exact_match"]["value"] == 1.0
    assert summary["exact_match"]["n"] == 5
