"""Demo extraction items: a free-text order note -> JSON with six fixed fields."""

from __future__ import annotations

import json
import random

FIELDS = ["customer", "order_id", "product", "quantity", "city", "date"]
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
    "Order #{order_id} was placed by {customer} on {date} for {quantity} units of {product}, shipped to {city}.",
    "{customer} from {city} ordered {quantity} x {product} on {date}. Reference: order {order_id}.",
    "On {date}, {customer} bought {quantity} {product} (order {order_id}) for delivery in {city}.",
    "Ship {quantity} of the {product} to {city}. Customer: {customer}. Order no. {order_id}, dated {date}.",
    "Please deliver order {order_id} to {customer} in {city}: {quantity} pieces of {product}, ordered {date}.",
    "We received {customer}'s order {order_id} on {date}; it contains {quantity} {product} and goes to {city}.",
    "Invoice {order_id} | {date} | {customer} | {city} | {product} x{quantity}",
    "{quantity} units of {product} were requested by {customer} ({city}) on {date} under order {order_id}.",
]


def make_record(rng: random.Random) -> dict:
    return {
        "customer": f"{rng.choice(FIRST)} {rng.choice(LAST)}",
        "order_id": rng.randint(1000, 99999),
        "product": f"{rng.choice(COLORS)} {rng.choice(THINGS)}",
        "quantity": rng.randint(1, 250),
        "city": rng.choice(CITIES),
        "date": f"20{rng.randint(18, 26):02d}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
    }


def make_item(rng: random.Random) -> dict:
    gold = make_record(rng)
    text = rng.choice(SENTENCES).format(**gold)
    return {"text": text, "gold": json.dumps(gold), "fields": FIELDS}


def prompt_of(doc: dict) -> str:
    return f"Extract {', '.join(doc['fields'])} as JSON.\nText: {doc['text']}\nJSON:"


def target_of(doc: dict) -> str:
    return " " + doc["gold"]
