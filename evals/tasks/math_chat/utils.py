import re
from pathlib import Path

from evals.registry import local_test_split

DEMO_MATH = Path(__file__).resolve().parent.parent / "demo_math"
NUMBER = r"-?\$?[0-9][0-9,]*(?:\.[0-9]+)?"
MARKED = re.compile(rf"(?:The final answer is|####)\s*\**\s*({NUMBER})", re.IGNORECASE)


def load_dataset(**kwargs):
    return local_test_split(DEMO_MATH)


def normalize(number: str) -> str:
    text = number.replace(",", "").replace("$", "").rstrip(".")
    try:
        value = float(text)
    except ValueError:
        return text
    return str(int(value)) if value.is_integer() else str(value)


def final_answer(response: str) -> str | None:
    """The number after the last answer marker, else the last number in the response."""
    marked = MARKED.findall(response)
    numbers = marked or re.findall(NUMBER, response)
    return normalize(numbers[-1]) if numbers else None


def process_results(doc, results):
    predicted = final_answer(results[0])
    gold = normalize(doc["answer"].split("####")[-1].strip())
    return {"exact_match": float(predicted is not None and predicted == gold)}
