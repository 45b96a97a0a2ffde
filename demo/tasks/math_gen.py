"""Demo math problems in GSM8K format: two-step word problems with carries, worked answer, final "#### N".

Numbers stay below 100 (products of one-digit factors). Each addition and subtraction is worked digit by
digit, units first, with the carry or borrow written out ("37+45: 7+5=12, 3+4+1=8, so 82"): written
left to right as a bare "37 + 45 = 82", the demo model never learned it (held-out exact match stayed at
0.06), because the first digit of the result depends on the carry out of the last.
"""

from __future__ import annotations

import random

NAMES = ["Ava", "Ben", "Chloe", "Dev", "Emma", "Finn", "Grace", "Hugo", "Ivy", "Jack", "Kira", "Liam",
         "Maya", "Noah", "Olga", "Pablo", "Quinn", "Rosa", "Sam", "Tara", "Uma", "Victor", "Wes", "Zoe"]
ITEMS = ["apples", "books", "coins", "stamps", "marbles", "pencils", "cards", "shells", "stickers",
         "bolts", "cookies", "tickets", "beads", "plants", "eggs", "boxes"]


def add_steps(a: int, b: int) -> str:
    """Two-digit addition, units first: "37+45: 7+5=12, 3+4+1=8, so 82"."""
    units = a % 10 + b % 10
    tens = a // 10 + b // 10 + units // 10
    return f"{a}+{b}: {a % 10}+{b % 10}={units}, {a // 10}+{b // 10}+{units // 10}={tens}, so {a + b}"


def sub_steps(a: int, b: int) -> str:
    """Two-digit subtraction (a >= b), units first with the borrow: "62-27: 12-7=5, 6-2-1=3, so 35"."""
    borrow = int(a % 10 < b % 10)
    top = a % 10 + 10 * borrow
    return f"{a}-{b}: {top}-{b % 10}={top - b % 10}, {a // 10}-{b // 10}-{borrow}={a // 10 - b // 10 - borrow}, so {a - b}"


def _sub_add(rng: random.Random) -> tuple[str, list[str], int]:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, b, c = rng.randint(30, 99), rng.randint(2, 29), rng.randint(2, 49)
    r1 = a - b
    r2 = r1 + c
    q = rng.choice([
        f"{name} has {a} {item}. {name} gives away {b} and then finds {c} more. How many {item} does {name} have now?",
        f"A shop had {a} {item}. It sold {b} of them and then received {c} new ones. How many {item} does the shop have?",
        f"There are {a} {item} in a crate. {b} are taken out and {c} are put in. How many {item} are in the crate?",
    ])
    return q, [sub_steps(a, b), add_steps(r1, c)], r2


def _mul_sub(rng: random.Random) -> tuple[str, list[str], int]:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    n, k = rng.randint(2, 9), rng.randint(2, 9)
    r1 = n * k
    g = rng.randint(1, r1 - 1)
    r2 = r1 - g
    q = rng.choice([
        f"{name} buys {n} bags with {k} {item} in each bag. {name} then uses {g} {item}. How many {item} are left?",
        f"Each of {n} shelves holds {k} {item}. {g} {item} are sold. How many {item} remain?",
        f"{name} packs {k} {item} into each of {n} boxes and later loses {g} of them. How many {item} does {name} still have?",
    ])
    return q, [f"{n}*{k}={r1}", sub_steps(r1, g)], r2


def _mul_add(rng: random.Random) -> tuple[str, list[str], int]:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, per_day, days = rng.randint(2, 59), rng.randint(2, 9), rng.randint(2, 9)
    r1 = per_day * days
    r2 = a + r1
    q = rng.choice([
        f"{name} starts with {a} {item} and collects {per_day} more every day for {days} days. How many {item} does {name} have?",
        f"A club owns {a} {item}. It adds {per_day} {item} each week for {days} weeks. How many {item} does the club own?",
    ])
    return q, [f"{per_day}*{days}={r1}", add_steps(a, r1)], r2


def _add_sub(rng: random.Random) -> tuple[str, list[str], int]:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, b = rng.randint(10, 69), rng.randint(10, 59)
    d = rng.randint(1, a + b - 1)
    r1 = a + b
    r2 = r1 - d
    q = rng.choice([
        f"{name} has {a} {item} and {name}'s sister has {b}. They give {d} {item} to a school. How many {item} do they have left together?",
        f"On Monday a farm picks {a} {item} and on Tuesday {b}. It ships {d} of them. How many {item} are still on the farm?",
    ])
    return q, [add_steps(a, b), sub_steps(r1, d)], r2


TEMPLATES = [_sub_add, _mul_sub, _mul_add, _add_sub]


def make_item(rng: random.Random) -> dict:
    question, steps, answer = rng.choice(TEMPLATES)(rng)
    return {"question": question, "answer": "\n".join(steps) + f"\n#### {answer}"}


def prompt_of(doc: dict) -> str:
    return f"Question: {doc['question']}\nAnswer:"


def target_of(doc: dict) -> str:
    return " " + doc["answer"]
