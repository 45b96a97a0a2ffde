import json
from pathlib import Path

from evals.demo import extraction_gen
from evals.registry import local_test_split

HERE = Path(__file__).resolve().parent


def load_dataset(**kwargs):
    return local_test_split(HERE)


def doc_to_text(doc):
    return extraction_gen.prompt_of(doc)


def parse_object(text: str):
    try:
        value = json.loads(text.strip())
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def field_scores(gold: dict, predicted: dict | None, fields: list[str]) -> dict:
    if predicted is None:
        return {"field_f1": 0.0, "json_valid": 0.0, "exact_match": 0.0}
    correct = sum(1 for f in fields if f in predicted and predicted[f] == gold[f])
    n_pred = len(predicted)
    precision = correct / n_pred if n_pred else 0.0
    recall = correct / len(fields)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"field_f1": f1, "json_valid": 1.0, "exact_match": float(predicted == gold)}


def process_results(doc, results):
    return field_scores(json.loads(doc["gold"]), parse_object(results[0]), doc["fields"])
