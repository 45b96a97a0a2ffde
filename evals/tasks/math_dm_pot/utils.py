from pathlib import Path

from evals import code_scoring
from evals.code_extraction import code_in_answer
from evals.code_scoring import Program
from evals.registry import local_test_split

HERE = Path(__file__).resolve().parent   # test.jsonl: math_dm's questions and answers
PROMPT = ("{question}\nWrite a Python function `solution()` that computes the answer and returns it as one number "
          "(an int, a fractions.Fraction or a float). Use only Python's standard library.")
HEADER = "from fractions import Fraction\n\n\ndef solution():\n"   # the answer opens with it (the YAML's gen_prefix)
# Runs after the model's code: what `solution()` returns, as text, is all the tests see (a plain value).
ANSWER_TEXT = "\n\ndef answer_text():\n    return str(solution())\n"
# The returned value must equal the generator's answer up to a double's rounding (a float, or a Fraction made from
# one): a trillionth of the answer (of 1, for an answer under 1).
TESTS = """from fractions import Fraction
text = answer_text().strip()
got, expected = Fraction(text), Fraction({answer!r})
assert abs(got - expected) <= max(abs(expected), 1) * Fraction(1, 10**12), f"returned {{text}}, not {answer}"
"""


def load_dataset(**kwargs):
    return local_test_split(HERE)


def doc_to_text(doc):
    return PROMPT.format(question=doc["question"])


def program(doc: dict, answer: str) -> Program:
    """The header + the body the answer continues it with (up to the fence that closes it), or + the answer's own
    block where it closed the opened one at once (its own `solution()` replaces the header's)."""
    code = code_in_answer(answer, opened=True)
    body = code if answer.partition("```")[0].strip() else "    pass\n\n" + code
    return Program(HEADER + body + ANSWER_TEXT, TESTS.format(answer=doc["answer"]), entry_points=("answer_text",))


prefetch, pass_at_1 = code_scoring.task_functions(program)


def process_results(doc: dict, results: list[str]) -> dict[str, float]:
    return {"exact_match": pass_at_1(doc, results)["pass@1"]}
