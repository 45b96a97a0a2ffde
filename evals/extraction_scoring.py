"""Scores for text -> JSON extraction: field-level F1, valid JSON, exact match, and schema conformance.

An item is {text, gold, schema} (the format users bring their own data in): gold is the expected object
(or its JSON text); schema is a JSON Schema object whose `properties` name the fields, or, as in the demo
data, `fields` lists them. Conformance checks `required` and each property's `type`, no more.
"""

from __future__ import annotations

import json

JSON_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "array": list,
              "object": dict, "null": type(None)}


def parse_object(text: str) -> dict | None:
    """The first JSON object in a response: bare, inside a ```json fence or after prose, on one line or many."""
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start >= 0:
        try:
            value, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            value = None
        if isinstance(value, dict):
            return value
        start = text.find("{", start + 1)
    return None


def gold_of(doc: dict) -> dict:
    return json.loads(doc["gold"]) if isinstance(doc["gold"], str) else doc["gold"]


def schema_of(doc: dict) -> dict | None:
    schema = doc.get("schema")
    return json.loads(schema) if isinstance(schema, str) else schema


def fields_of(doc: dict) -> list[str]:
    schema = schema_of(doc)
    return list(schema["properties"]) if schema else list(doc["fields"])


def prompt_of(doc: dict) -> str:
    return f"Extract {', '.join(fields_of(doc))} as JSON.\nText: {doc['text']}\nJSON:"


def _has_type(value, type_name) -> bool:
    names = type_name if isinstance(type_name, list) else [type_name]
    if isinstance(value, bool):  # JSON's true/false are not numbers
        return "boolean" in names
    return any(isinstance(value, JSON_TYPES[n]) for n in names if n in JSON_TYPES)


def conforms(value: dict, schema: dict) -> bool:
    if any(f not in value for f in schema.get("required", [])):
        return False
    props = schema.get("properties", {})
    return all(_has_type(v, props[k]["type"]) for k, v in value.items() if "type" in props.get(k, {}))


def field_scores(gold: dict, predicted: dict | None, fields: list[str]) -> dict:
    if predicted is None:
        return {"field_f1": 0.0, "json_valid": 0.0, "exact_match": 0.0}
    correct = sum(1 for f in fields if f in predicted and predicted[f] == gold[f])
    n_pred = len(predicted)
    precision = correct / n_pred if n_pred else 0.0
    recall = correct / len(fields)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"field_f1": f1, "json_valid": 1.0, "exact_match": float(predicted == gold)}


def score(doc: dict, completion: str) -> dict:
    predicted = parse_object(completion)
    scores = field_scores(gold_of(doc), predicted, fields_of(doc))
    schema = schema_of(doc)
    if schema is not None:
        scores["schema_valid"] = float(predicted is not None and conforms(predicted, schema))
    return scores
