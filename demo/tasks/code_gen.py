"""Demo code problems in HumanEval format: signature + docstring, reference body, unit tests.

Each family is a tiny function template whose constants, names and wording vary; the model must turn
the docstring into the body and copy the constants, which makes small models sensitive to weight noise.
"""

from __future__ import annotations

import random
from typing import Callable

VERBS = ["get", "compute", "make", "find", "build", "calc"]
LIST_ARGS = ["xs", "values", "nums", "items", "data"]
WORD_ARGS = ["words", "names", "tokens", "parts"]
STR_ARGS = ["s", "text", "word", "line"]
NUM_ARGS = ["x", "n", "value", "num"]
SUFFIXES = ["ing", "ed", "er", "ly", "s", "est"]
PREFIXES = ["re", "un", "pre", "de", "in", "co"]
WORDS_POOL = ["apple", "kiwi", "banana", "fig", "cherry", "date", "lemon", "mango", "pear", "plum",
              "grape", "melon", "berry", "peach", "lime", "olive"]

Family = Callable[[random.Random], tuple]  # -> (fname, args, docstring, body, test_args)


def _name(rng, stem):
    return f"{rng.choice(VERBS)}_{stem}"


def _ints(rng, n=6, lo=-20, hi=40):
    return [rng.randint(lo, hi) for _ in range(n)]


def _words(rng, n=5):
    return rng.sample(WORDS_POOL, n)


def add_const(rng):
    x, c = rng.choice(NUM_ARGS), rng.randint(2, 99)
    doc = rng.choice([f"Return {x} plus {c}.", f"Add {c} to {x} and return the result."])
    return _name(rng, "sum"), [x], doc, f"return {x} + {c}", [(v,) for v in (0, 7, -3)]


def linear(rng):
    x, a, b = rng.choice(NUM_ARGS), rng.randint(2, 9), rng.randint(2, 99)
    doc = rng.choice([f"Return {x} times {a} plus {b}.", f"Multiply {x} by {a}, then add {b}."])
    return _name(rng, "linear"), [x], doc, f"return {x} * {a} + {b}", [(v,) for v in (0, 5, -4)]


def scale_list(rng):
    xs, c = rng.choice(LIST_ARGS), rng.randint(2, 9)
    doc = rng.choice([f"Return a list with every element of {xs} multiplied by {c}.",
                      f"Multiply each number in {xs} by {c} and return the new list."])
    return _name(rng, "scaled"), [xs], doc, f"return [v * {c} for v in {xs}]", [(_ints(rng),), ([],)]


def shift_list(rng):
    xs, c = rng.choice(LIST_ARGS), rng.randint(2, 50)
    doc = rng.choice([f"Return a list with {c} subtracted from every element of {xs}.",
                      f"Subtract {c} from each number in {xs} and return the list."])
    return _name(rng, "shifted"), [xs], doc, f"return [v - {c} for v in {xs}]", [(_ints(rng),), ([],)]


def filter_gt(rng):
    xs, c = rng.choice(LIST_ARGS), rng.randint(-5, 30)
    doc = rng.choice([f"Return the elements of {xs} that are greater than {c}.",
                      f"Keep only the numbers in {xs} larger than {c}."])
    return _name(rng, "above"), [xs], doc, f"return [v for v in {xs} if v > {c}]", [(_ints(rng, 8),)]


def filter_mod(rng):
    xs, c = rng.choice(LIST_ARGS), rng.randint(2, 7)
    doc = rng.choice([f"Return the elements of {xs} that are divisible by {c}.",
                      f"Keep only the multiples of {c} in {xs}."])
    return _name(rng, "multiples"), [xs], doc, f"return [v for v in {xs} if v % {c} == 0]", [(_ints(rng, 8),)]


def sum_above(rng):
    xs, c = rng.choice(LIST_ARGS), rng.randint(-5, 30)
    doc = f"Return the sum of the elements of {xs} that are greater than {c}."
    body = f"total = 0\nfor v in {xs}:\n    if v > {c}:\n        total += v\nreturn total"
    return _name(rng, "total"), [xs], doc, body, [(_ints(rng, 8),), ([],)]


def count_below(rng):
    xs, c = rng.choice(LIST_ARGS), rng.randint(-5, 30)
    doc = f"Count how many elements of {xs} are less than {c}."
    body = f"count = 0\nfor v in {xs}:\n    if v < {c}:\n        count += 1\nreturn count"
    return _name(rng, "count"), [xs], doc, body, [(_ints(rng, 8),), ([],)]


def max_plus(rng):
    xs, c = rng.choice(LIST_ARGS), rng.randint(1, 60)
    doc = f"Return the largest element of {xs} plus {c}."
    return _name(rng, "peak"), [xs], doc, f"return max({xs}) + {c}", [(_ints(rng),)]


def min_times(rng):
    xs, c = rng.choice(LIST_ARGS), rng.randint(2, 9)
    doc = f"Return the smallest element of {xs} multiplied by {c}."
    return _name(rng, "low"), [xs], doc, f"return min({xs}) * {c}", [(_ints(rng),)]


def clamp(rng):
    x, lo = rng.choice(NUM_ARGS), rng.randint(-20, 10)
    hi = lo + rng.randint(5, 40)
    doc = f"Clamp {x} to the range from {lo} to {hi}."
    return _name(rng, "clamped"), [x], doc, f"return min(max({x}, {lo}), {hi})", [(lo - 3,), (hi + 4,), (lo + 2,)]


def first_n(rng):
    xs, c = rng.choice(LIST_ARGS), rng.randint(1, 5)
    doc = f"Return the first {c} elements of {xs}."
    return _name(rng, "head"), [xs], doc, f"return {xs}[:{c}]", [(_ints(rng, 7),)]


def last_n(rng):
    xs, c = rng.choice(LIST_ARGS), rng.randint(1, 5)
    doc = f"Return the last {c} elements of {xs}."
    return _name(rng, "tail"), [xs], doc, f"return {xs}[-{c}:]", [(_ints(rng, 7),)]


def reversed_list(rng):
    xs = rng.choice(LIST_ARGS)
    doc = rng.choice([f"Return {xs} in reverse order.", f"Reverse {xs} and return it as a new list."])
    return _name(rng, "reversed"), [xs], doc, f"return {xs}[::-1]", [(_ints(rng),)]


def mod_list(rng):
    xs, c = rng.choice(LIST_ARGS), rng.randint(2, 9)
    doc = f"Return each element of {xs} modulo {c}."
    return _name(rng, "remainders"), [xs], doc, f"return [v % {c} for v in {xs}]", [(_ints(rng),)]


def is_divisible(rng):
    x, c = rng.choice(NUM_ARGS), rng.randint(2, 13)
    doc = f"Return True if {x} is divisible by {c}, otherwise False."
    return "is_" + rng.choice(["div", "multiple", "even_by"]), [x], doc, f"return {x} % {c} == 0", [(c * 3,), (c * 3 + 1,), (0,)]


def add_suffix(rng):
    s, suf = rng.choice(STR_ARGS), rng.choice(SUFFIXES)
    doc = f'Return {s} with "{suf}" added at the end.'
    return _name(rng, "suffixed"), [s], doc, f'return {s} + "{suf}"', [("walk",), ("",)]


def add_prefix(rng):
    s, pre = rng.choice(STR_ARGS), rng.choice(PREFIXES)
    doc = f'Return {s} with "{pre}" added at the start.'
    return _name(rng, "prefixed"), [s], doc, f'return "{pre}" + {s}', [("do",), ("",)]


def repeat_str(rng):
    s, c = rng.choice(STR_ARGS), rng.randint(2, 6)
    doc = f"Return {s} repeated {c} times."
    return _name(rng, "repeated"), [s], doc, f"return {s} * {c}", [("ab",), ("",)]


def join_words(rng):
    w, sep = rng.choice(WORD_ARGS), rng.choice(["-", ", ", "+", " | ", "/", "_"])
    doc = f'Join the strings in {w} with "{sep}" between them.'
    return _name(rng, "joined"), [w], doc, f'return "{sep}".join({w})', [(_words(rng, 3),), ([],)]


def long_words(rng):
    w, c = rng.choice(WORD_ARGS), rng.randint(3, 5)
    doc = f"Return the strings in {w} that are longer than {c} characters, in upper case."
    return _name(rng, "long"), [w], doc, f"return [t.upper() for t in {w} if len(t) > {c}]", [(_words(rng, 6),)]


def count_start(rng):
    w, ch = rng.choice(WORD_ARGS), rng.choice("abcdefglmp")
    doc = f'Count the strings in {w} that start with "{ch}".'
    body = f'count = 0\nfor t in {w}:\n    if t.startswith("{ch}"):\n        count += 1\nreturn count'
    return _name(rng, "starts"), [w], doc, body, [(_words(rng, 8),)]


def product(rng):
    xs = rng.choice(LIST_ARGS)
    doc = f"Return the product of the numbers in {xs}."
    body = f"result = 1\nfor v in {xs}:\n    result *= v\nreturn result"
    return _name(rng, "product"), [xs], doc, body, [([2, 3, 4],), ([],), (_ints(rng, 4, -5, 9),)]


def pairwise(rng):
    xs, op, word = rng.choice(LIST_ARGS), *rng.choice([("+", "sums"), ("-", "differences"), ("*", "products")])
    doc = f"Return the {word} of corresponding elements of {xs} and ys."
    return _name(rng, "pairs"), [xs, "ys"], doc, f"return [a {op} b for a, b in zip({xs}, ys)]", [(_ints(rng, 4), _ints(rng, 4))]


def fizz(rng):
    x, a = rng.choice(NUM_ARGS), rng.randint(2, 5)
    b = rng.choice([k for k in range(3, 8) if k != a])
    w1, w2 = rng.sample(["fizz", "buzz", "ping", "pong", "zip", "zap"], 2)
    doc = f'Return "{w1}" if {x} is divisible by {a}, "{w2}" if it is divisible by {b}, else {x} as a string.'
    body = f'if {x} % {a} == 0:\n    return "{w1}"\nif {x} % {b} == 0:\n    return "{w2}"\nreturn str({x})'
    return _name(rng, "label"), [x], doc, body, [(a * b,), (b,), (a * b + 1,)]


def range_step(rng):
    n, c = rng.choice(NUM_ARGS), rng.randint(2, 7)
    doc = f"Return the list of numbers from 0 up to but not including {n}, in steps of {c}."
    return _name(rng, "steps"), [n], doc, f"return list(range(0, {n}, {c}))", [(20,), (0,), (c * 3,)]


def sum_squares(rng):
    xs, c = rng.choice(LIST_ARGS), rng.randint(1, 9)
    doc = f"Return the sum of the squares of the elements of {xs}, plus {c}."
    return _name(rng, "energy"), [xs], doc, f"return sum(v * v for v in {xs}) + {c}", [(_ints(rng, 5, -9, 9),), ([],)]


def dict_lookup(rng):
    key, c = rng.choice(["name", "age", "size", "color", "id", "city"]), rng.randint(0, 99)
    doc = f'Return the value stored under "{key}" in d, or {c} if it is missing.'
    return _name(rng, "field"), ["d"], doc, f'return d.get("{key}", {c})', [({key: 5},), ({},)]


def abs_diff(rng):
    x, c = rng.choice(NUM_ARGS), rng.randint(1, 80)
    doc = f"Return the distance between {x} and {c}."
    return _name(rng, "distance"), [x], doc, f"return abs({x} - {c})", [(0,), (c + 9,), (-4,)]


FAMILIES: list[Family] = [
    add_const, linear, scale_list, shift_list, filter_gt, filter_mod, sum_above, count_below, max_plus,
    min_times, clamp, first_n, last_n, reversed_list, mod_list, is_divisible, add_suffix, add_prefix,
    repeat_str, join_words, long_words, count_start, product, pairwise, fizz, range_step, sum_squares,
    dict_lookup, abs_diff,
]


def _indent(body: str, pad: str = "    ") -> str:
    return "\n".join(pad + line for line in body.splitlines()) + "\n"


def make_item(rng: random.Random, task_id: str) -> dict:
    fname, args, doc, body, test_args = rng.choice(FAMILIES)(rng)
    prompt = f'def {fname}({", ".join(args)}):\n    """{doc}"""\n'
    solution = _indent(body)
    namespace: dict = {}
    exec(prompt + solution, namespace)  # our own reference code, never model output
    fn = namespace[fname]
    asserts = [f"    assert candidate({', '.join(map(repr, a))}) == {fn(*a)!r}" for a in test_args]
    test = "def check(candidate):\n" + "\n".join(asserts) + "\n"
    return {"task_id": task_id, "prompt": prompt, "canonical_solution": solution, "test": test,
            "entry_point": fname}


def prompt_of(doc: dict) -> str:
    return doc["prompt"]


def target_of(doc: dict) -> str:
    return doc["canonical_solution"]
