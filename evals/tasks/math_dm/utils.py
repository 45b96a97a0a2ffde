import re
from pathlib import Path

from evals import item_errors
from evals.registry import local_test_split
from evals.sympy_values import Unreadable, read_value, same
from evals.tasks.math_open.utils import MARKER, final_answer

HERE = Path(__file__).resolve().parent
BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
NAMED = re.compile(r"^[A-Za-z]\w*\s*=\s*")           # "a = -4", for "Solve ... for a."
THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
PROMPT = ("{question}\n\n"
          "Work it out step by step, then end your response with \"The answer is: \" followed by the answer, "
          "a single number (an integer, a fraction such as -3/7, or a decimal), on one line.\n")


def load_dataset(**kwargs):
    return local_test_split(HERE)


def doc_to_text(doc):
    return PROMPT.format(question=doc["question"])


def number_text(response: str) -> str:
    """The final answer as a number's text: out of a LaTeX box, without the unknown's name in front and without
    thousands separators."""
    boxed = BOXED.findall(response)
    text = boxed[-1].strip() if boxed and not MARKER.search(response) else final_answer(response)
    boxed = BOXED.findall(text)
    text = boxed[-1].strip() if boxed else text
    return THOUSANDS.sub("", NAMED.sub("", text, count=1))


def scores(doc, results):
    try:
        predicted = read_value(number_text(results[0]))
    except Unreadable:
        return {"exact_match": 0.0}
    return {"exact_match": float(same(predicted, read_value(doc["answer"])))}


process_results = item_errors.guarded(scores, ("exact_match",))
