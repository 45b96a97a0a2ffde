"""Demo extraction items: a free-text order note -> JSON with four fixed fields."""

from __future__ import annotations

import json
import random

from evals import extraction_scoring

FIELDS = ["customer", "product", "quantity", "city"]
FIRST = ["Maria", "James", "Aiko", "Omar", "Lena", "Carlos", "Priya", "Tomas", "Nora", "Felix", "Sofia",
         "Mateo", "Hana", "Ivan", "Leila", "Oscar", "Greta", "Ravi", "Elena", "Kofi"]
LAST = ["Lopez", "Smith", "Tanaka", "Haddad", "Berg", "Silva", "Patel", "Novak", "Kim", "Weber", "Rossi",
        "Garcia", "Sato", "Petrov", "Nasser", "Moreau", "Larsen", "Rao", "Costa", "Mensah"]
CITIES = ["Denver", "Lyon", "Osaka", "Porto", "Austin", "Leeds", "Graz", "Quito", "Perth", "Turin",
          "Malmo", "Dakar", "Hanoi", "Bergen", "Tampa", "Cork"]
COLORS = ["blue", "red", "green", "black", "white", "silver", "yellow", "orange"]
THINGS = ["widget", "lamp", "kettle", "backpack", "notebook", "chair", "headset", "bottle", "printer",
          "blanket", "mug", "router"]

SENTENCES = [
    "{customer} from {city} ordered {quantity} x {product}.",
    "Ship {quantity} of the {product} to {city}. Customer: {customer}.",
    "Please deliver {quantity} pieces of {product} to {customer} in {city}.",
    "Invoice | {customer} | {city} | {product} x{quantity}",
    "{quantity} units of {product} were requested by {customer} ({city}).",
]


def make_record(rng: random.Random) -> dict:
    return {
        "customer": f"{rng.choice(FIRST)} {rng.choice(LAST)}",
        "product": f"{rng.choice(COLORS)} {rng.choice(THINGS)}",
        "quantity": rng.randint(1, 250),
        "city": rng.choice(CITIES),
    }


def make_item(rng: random.Random) -> dict:
    gold = make_record(rng)
    text = rng.choice(SENTENCES).format(**gold)
    return {"text": text, "gold": json.dumps(gold), "fields": FIELDS}


def prompt_of(doc: dict) -> str:
    return extraction_scoring.prompt_of(doc)


def target_of(doc: dict) -> str:
    return " " + doc["gold"]
