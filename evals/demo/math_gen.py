"""Demo math problems in GSM8K format: multi-step word problems, worked answer, final "#### N"."""

from __future__ import annotations

import random

NAMES = ["Ava", "Ben", "Chloe", "Dev", "Emma", "Finn", "Grace", "Hugo", "Ivy", "Jack", "Kira", "Liam",
         "Maya", "Noah", "Olga", "Pablo", "Quinn", "Rosa", "Sam", "Tara", "Uma", "Victor", "Wes", "Zoe"]
ITEMS = ["apples", "books", "coins", "stamps", "marbles", "pencils", "cards", "shells", "stickers",
         "bolts", "cookies", "tickets", "beads", "plants", "eggs", "boxes"]


def _sub_add(rng: random.Random) -> tuple[str, list[str], int]:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, b, c = rng.randint(60, 399), rng.randint(11, 59), rng.randint(11, 99)
    r1 = a - b
    r2 = r1 + c
    q = rng.choice([
        f"{name} has {a} {item}. {name} gives away {b} and then finds {c} more. How many {item} does {name} have now?",
        f"A shop had {a} {item}. It sold {b} of them and then received {c} new ones. How many {item} does the shop have?",
        f"There are {a} {item} in a crate. {b} are taken out and {c} are put in. How many {item} are in the crate?",
    ])
    return q, [f"{a} - {b} = {r1}", f"{r1} + {c} = {r2}"], r2


def _mul_sub(rng: random.Random) -> tuple[str, list[str], int]:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    n, k = rng.randint(3, 19), rng.randint(3, 9)
    r1 = n * k
    g = rng.randint(2, r1 - 1)
    r2 = r1 - g
    q = rng.choice([
        f"{name} buys {n} bags with {k} {item} in each bag. {name} then uses {g} {item}. How many {item} are left?",
        f"Each of {n} shelves holds {k} {item}. {g} {item} are sold. How many {item} remain?",
        f"{name} packs {k} {item} into each of {n} boxes and later loses {g} of them. How many {item} does {name} still have?",
    ])
    return q, [f"{n} * {k} = {r1}", f"{r1} - {g} = {r2}"], r2


def _add_mul_add(rng: random.Random) -> tuple[str, list[str], int]:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, per_day, days = rng.randint(12, 299), rng.randint(4, 29), rng.randint(3, 9)
    c = rng.randint(11, 99)
    r1 = per_day * days
    r2 = a + r1
    r3 = r2 + c
    q = rng.choice([
        f"{name} starts with {a} {item} and collects {per_day} more every day for {days} days. Then a friend gives {name} {c} {item}. How many {item} does {name} have?",
        f"A club owns {a} {item}. It adds {per_day} {item} each week for {days} weeks and then receives a gift of {c}. How many {item} does the club own?",
    ])
    return q, [f"{per_day} * {days} = {r1}", f"{a} + {r1} = {r2}", f"{r2} + {c} = {r3}"], r3


def _add_add_sub(rng: random.Random) -> tuple[str, list[str], int]:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, b, c = rng.randint(15, 299), rng.randint(15, 199), rng.randint(15, 99)
    d = rng.randint(11, a + b + c - 1)
    r1 = a + b
    r2 = r1 + c
    r3 = r2 - d
    q = rng.choice([
        f"{name} has {a} {item}, {name}'s sister has {b} and their cousin has {c}. They give {d} {item} to a school. How many {item} do they have left together?",
        f"On Monday a farm picks {a} {item}, on Tuesday {b} and on Wednesday {c}. It ships {d} of them. How many {item} are still on the farm?",
    ])
    return q, [f"{a} + {b} = {r1}", f"{r1} + {c} = {r2}", f"{r2} - {d} = {r3}"], r3


TEMPLATES = [_sub_add, _mul_sub, _add_mul_add, _add_add_sub]


def make_item(rng: random.Random) -> dict:
    question, steps, answer = rng.choice(TEMPLATES)(rng)
    return {"question": question, "answer": "\n".join(steps) + f"\n#### {answer}"}


def prompt_of(doc: dict) -> str:
    return f"Question: {doc['question']}\nAnswer:"


def target_of(doc: dict) -> str:
    return " " + doc["answer"]
