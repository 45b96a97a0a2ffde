"""An answer that breaks its scorer fails its item, with the reason in the item's record, never the task: through
lm-eval and our tasks as a sweep scores them, with answers a broken variant could write (a fault injected on
purpose: the LM below answers from a table). And the parser's thread race that once failed a whole variant
(`SystemError: AST constructor recursion depth mismatch`) is kept out of code scoring's pool."""

from __future__ import annotations

import gc
import json
import logging
from concurrent.futures import ThreadPoolExecutor

import pytest
from lm_eval.api.model import LM

from core.recipe import Task
from evals import code_scoring, scoring_names
from evals.runner import evaluate_task
from evals.sandbox import permit_unisolated

RIGHT = ("    for i, a in enumerate(numbers):\n        for b in numbers[i + 1:]:\n"
         "            if abs(a - b) < threshold:\n                return True\n    return False\n")
DEEP_JSON = '{"customer": ' + "[" * 100_000 + "]" * 100_000 + "}"


class TableLM(LM):
    """Answers each request with the text of the first key found in its prompt."""

    def __init__(self, answers: dict[str, str]):
        super().__init__()
        self.answers = answers

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        return [next(a for key, a in self.answers.items() if key in r.args[0]) for r in requests]

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError


def by_entry_point(samples: list[dict]) -> dict[int, dict]:
    return {s["doc_id"]: s for s in samples}


def test_code_answers_that_break_scoring_fail_their_items_only(monkeypatch, caplog):
    monkeypatch.setattr(code_scoring, "_known", {})
    answers = {"def has_close_elements(": RIGHT,
               "def separate_paren_groups(": "    return " + "[" * 5000 + "]" * 5000 + "\n",   # too deep to parse
               "def truncate_number(": "    return number % 1.0  # \udcff\n",                 # not encodable text
               "def below_zero(": "    balance = 0\n" * 20_000 + "    return False\n"}       # enormous, and wrong
    with permit_unisolated(True), caplog.at_level(logging.DEBUG, logger="evals.item_errors"):
        summary, samples = evaluate_task(TableLM(answers), Task(name="humaneval_instruct", limit=4))
    items = by_entry_point(samples)
    assert [items[i]["metrics"]["pass@1,sandboxed"] for i in range(4)] == [1.0, 0.0, 0.0, 0.0]
    assert summary["pass@1"]["value"] == 0.25 and summary["pass@1"]["n"] == 4
    assert items[2]["scoring_error"].startswith("UnicodeEncodeError: ")
    assert all("scoring_error" not in items[i] for i in (0, 1, 3))   # failed their tests: no scoring error
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1 and isinstance(tracebacks[0].exc_info[1], UnicodeEncodeError)


def test_json_nested_past_the_recursion_limit_fails_its_item_only(tmp_path):
    items = [{"text": "Lena Costa ordered 2 chairs.", "gold": {"customer": "Lena Costa"}},
             {"text": "Aiko Silva ordered 3 lamps.", "gold": {"customer": "Aiko Silva"}}]
    data = tmp_path / "items.jsonl"
    data.write_text("".join(json.dumps({**i, "fields": ["customer"]}) + "\n"
                            for i in items))
    answers = {"Lena Costa": '{"customer": "Lena Costa"}', "Aiko Silva": DEEP_JSON}
    summary, samples = evaluate_task(TableLM(answers), Task(name="extraction", data_files=str(data)))
    assert [s["metrics"]["field_f1,none"] for s in samples] == [1.0, 0.0]
    assert samples[1]["scoring_error"].startswith("RecursionError: ")
    assert summary["field_f1"]["n"] == 2


class Collected:
    """Garbage whose finaliser runs Python code: the collector can run it in the middle of a parse, and then
    another thread may take the interpreter."""

    def __del__(self):
        sum(range(200))


def test_tests_are_parsed_safely_from_many_threads():
    tests = [f"def check(candidate):\n    assert candidate({i}) == [{i}, ({i}, {{'k': [{i}]}})]\n" * 20
             for i in range(300)]

    def plan(text: str):
        a, b = Collected(), Collected()
        a.other, b.other = b, a
        return scoring_names.plan(text, ("candidate",))

    threshold = gc.get_threshold()
    gc.set_threshold(50, 1, 1)
    try:
        with ThreadPoolExecutor(16) as pool:
            plans = list(pool.map(plan, tests))
    finally:
        gc.set_threshold(*threshold)
    assert all(p["entry_points"] == ["candidate"] for p in plans)


def test_a_missing_sandbox_still_ends_the_task_and_is_no_items_fault(monkeypatch):
    from evals.sandbox import IsolationRequired, capabilities

    bare = type(capabilities())(bwrap=None, cgroup_v2=None, cgroup_v1={})
    monkeypatch.setattr("evals.sandbox.capabilities", lambda: bare)
    monkeypatch.setattr(code_scoring, "capabilities", lambda: bare)
    monkeypatch.setattr("evals.execute.capabilities", lambda: bare)
    _, process_results = code_scoring.task_functions(code_scoring.humaneval_program)
    doc = {"prompt": "def f(x):\n", "test": "def check(f):\n    assert f(1) == 1\n", "entry_point": "f"}
    with permit_unisolated(False), pytest.raises(IsolationRequired):
        process_results(doc, ["    return x\n"])
