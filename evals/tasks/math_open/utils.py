import re
from pathlib import Path

from evals import item_errors
from evals.registry import local_test_split
from evals.sympy_values import Unreadable, read_value, same

HERE = Path(__file__).resolve().parent
MARKER = re.compile(r"answer is\s*:?[ \t]*", re.IGNORECASE)
FENCE = re.compile(r"^```[\w+-]*$")
PROMPT = ("Here is a Python session with SymPy. Work out the value that its last line prints.\n\n"
          "```python\n{session}```\n\n"
          "End your response with \"The answer is: \" followed by that value, written as SymPy prints it, "
          "on one line.\n")


def load_dataset(**kwargs):
    return local_test_split(HERE)


def doc_to_text(doc):
    return PROMPT.format(session=doc["prompt"])


def final_answer(response: str) -> str:
    """What follows the last "The answer is:" (on its line, else the next line with text), else the response's
    last line with text; without the backticks, dollars and full stop around it."""
    marked = list(MARKER.finditer(response))
    rest = response[marked[-1].end():] if marked else response
    lines = [line.strip() for line in rest.splitlines()]
    lines = [line for line in lines if line.strip("`$") and not FENCE.match(line)]
    if not lines:
        return ""
    line = lines[0] if marked else lines[-1]
    return line.strip("`$* ").removesuffix(".").strip("`$* ")


def scores(doc, results):
    try:
        predicted = read_value(final_answer(results[0]))
    except Unreadable:
        return {"exact_match": 0.0}
    return {"exact_match": float(same(predicted, read_value(doc["answer"])))}


process_results = item_errors.guarded(scores, ("exact_match",))
