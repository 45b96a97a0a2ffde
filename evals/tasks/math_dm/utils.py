import math
import re
from pathlib import Path

from evals import item_errors
from evals.registry import local_test_split
from evals.sympy_values import Unreadable, read_value, same
from evals.tasks.math_open.utils import final_answer

HERE = Path(__file__).resolve().parent
# The chain-of-thought instruction Qwen's and DeepSeek's math evaluations give (their model cards): the model
# works the question out and boxes its answer.
PROMPT = "{question}\nPlease reason step by step, and put your final answer within \\boxed{{}}."
FRACTION = re.compile(r"\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}")
LATEX = {r"\left": "", r"\right": "", r"\cdot": "*", r"\times": "*", r"\div": "/", r"\!": "", r"\,": "",
         "{,}": ",", r"\ ": "", "−": "-"}
NAMED = re.compile(r"^[A-Za-z]\w*\s*=\s*")           # "a = -4", for "Solve ... for a."
THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
NUMBER = re.compile(r"-?\d+(\.\d+)?|-?(\d+)/(\d+)")


def load_dataset(**kwargs):
    return local_test_split(HERE)


def doc_to_text(doc):
    return PROMPT.format(question=doc["question"])


def last_boxed(response: str) -> str | None:
    """What the last `\\boxed{...}` holds (braces inside it matched), else None."""
    start = response.rfind("\\boxed{")
    if start < 0:
        return None
    depth, begin = 0, start + len("\\boxed{")
    for i in range(begin - 1, len(response)):
        depth += {"{": 1, "}": -1}.get(response[i], 0)
        if depth == 0:
            return response[begin:i]
    return None


def number_text(response: str) -> str:
    """The final answer as a number's text: the last boxed answer (else math_open's final answer) with LaTeX's
    fractions and operators written out, without the unknown's name in front or thousands separators."""
    boxed = last_boxed(response)
    text = boxed if boxed is not None else final_answer(response)
    for latex, plain in LATEX.items():
        text = text.replace(latex, plain)
    text = FRACTION.sub(r"(\1)/(\2)", text).strip().strip("$").strip().removesuffix(".")
    return THOUSANDS.sub("", NAMED.sub("", text, count=1))


def written_as_a_number(text: str) -> bool:
    """An integer, a decimal or a fraction in lowest terms, as the generator writes its answers: `-114/-6` or
    `2*3` is the question restated, not its answer."""
    found = NUMBER.fullmatch(text.replace(" ", "").replace("(", "").replace(")", ""))
    return bool(found) and (found.group(2) is None or (math.gcd(int(found.group(2)), int(found.group(3))) == 1
                                                       and int(found.group(3)) > 1))


def scores(doc, results):
    text = number_text(results[0])
    if not written_as_a_number(text):
        return {"exact_match": 0.0}
    try:
        predicted = read_value(text)
    except Unreadable:
        return {"exact_match": 0.0}
    return {"exact_match": float(same(predicted, read_value(doc["answer"])))}


process_results = item_errors.guarded(scores, ("exact_match",))
