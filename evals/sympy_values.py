"""A model's written answer read as a SymPy value, without running it: the expression is parsed (never
evaluated by Python) and built from numbers, symbols, the arithmetic operators, tuples, lists, sets and dicts,
and SymPy's own classes and constants (`sin`, `Interval`, `FiniteSet`, `pi`, `oo`, `S.Reals` ...), so nothing
else of Python or SymPy can be reached from an answer. Two values are the same when SymPy holds them equal as
it builds them: the order of terms, spacing and parentheses do not matter, nor a number's form (0.5 is 1/2,
within a relative 1e-9); a factored form is not its expansion.
"""

from __future__ import annotations

import ast
import operator
import time
from functools import cache

from evals.scoring_names import parse

MAX_CHARS = 2000     # longer than any answer of the task's; more is not read
MAX_NODES = 600
MAX_EXPONENT = 10_000   # a power above this is not built (10**10**10 would take the machine)
MAX_ARGUMENT = 1000     # nor a class called with a number above this (binomial(10**6, 5*10**5) takes minutes)
MAX_SECONDS = 2.0       # nor any more part once building took this long (bell(1000) alone takes seconds)
MAX_DIGITS = 400

BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
          ast.Pow: operator.pow, ast.Mod: operator.mod}
UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
FUNCTIONS = ("sqrt", "root", "cbrt", "Matrix")   # plain functions of SymPy's that build values


class Unreadable(ValueError):
    """The answer is not a value this reader builds."""


@cache
def _names() -> dict:
    """SymPy's public names that are values or build values: its Basic classes and instances, and FUNCTIONS."""
    import sympy

    names = {}
    for name in sympy.__all__:
        value = getattr(sympy, name)
        if isinstance(value, sympy.Basic) or (isinstance(value, type) and issubclass(value, sympy.Basic)):
            names[name] = value
    names.update({name: getattr(sympy, name) for name in FUNCTIONS})
    return names


def read_value(text: str):
    """The SymPy value (or tuple, list, set, dict of them) that `text` writes. Raises Unreadable."""
    import sympy

    if len(text) > MAX_CHARS:
        raise Unreadable(f"longer than {MAX_CHARS} characters")
    try:
        tree = parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise Unreadable(f"not an expression: {type(exc).__name__}") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise Unreadable(f"more than {MAX_NODES} parts")
    try:
        return _build(tree.body, sympy, time.monotonic() + MAX_SECONDS)
    except Unreadable:
        raise
    except (TypeError, ValueError, ArithmeticError, AttributeError, RecursionError,
            sympy.SympifyError, sympy.PolynomialError) as exc:
        raise Unreadable(f"{type(exc).__name__}: {exc}"[:200]) from None


def _build(node, sympy, deadline: float):
    if time.monotonic() > deadline:
        raise Unreadable(f"took more than {MAX_SECONDS:g} s to build")
    if isinstance(node, ast.Constant) and type(node.value) in (int, float, bool):
        if type(node.value) is int and len(str(abs(node.value))) > MAX_DIGITS:
            raise Unreadable(f"a number of more than {MAX_DIGITS} digits")
        return sympy.sympify(node.value)
    if isinstance(node, ast.Name):
        return _names().get(node.id) or sympy.Symbol(node.id)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "S":
        value = getattr(sympy.S, node.attr, None)
        if isinstance(value, sympy.Basic):
            return value
        raise Unreadable(f"S.{node.attr}")
    if isinstance(node, ast.BinOp) and type(node.op) in BINARY:
        left, right = _build(node.left, sympy, deadline), _build(node.right, sympy, deadline)
        if isinstance(node.op, ast.Pow) and (_above(right, MAX_EXPONENT, sympy) or _digits(left, right, sympy) > 10**5):
            raise Unreadable(f"a power above {MAX_EXPONENT}, or of more than 100,000 digits")
        return BINARY[type(node.op)](sympy.sympify(left), right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in UNARY:
        return UNARY[type(node.op)](sympy.sympify(_build(node.operand, sympy, deadline)))
    if isinstance(node, ast.Tuple):
        return tuple(_build(e, sympy, deadline) for e in node.elts)
    if isinstance(node, ast.List):
        return [_build(e, sympy, deadline) for e in node.elts]
    if isinstance(node, ast.Set):
        return frozenset(_build(e, sympy, deadline) for e in node.elts)
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {_build(k, sympy, deadline): _build(v, sympy, deadline) for k, v in zip(node.keys, node.values)}
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _names()
            and not node.keywords):
        function = _names()[node.func.id]
        if isinstance(function, sympy.Basic):   # a constant is not called
            raise Unreadable(f"{node.func.id} called")
        args = [_build(a, sympy, deadline) for a in node.args]
        if any(_above(a, MAX_ARGUMENT, sympy) for a in args):
            raise Unreadable(f"{node.func.id} of a number above {MAX_ARGUMENT}")
        return function(*args)
    raise Unreadable(f"{type(node).__name__} is not part of a value")


def _above(value, limit: int, sympy) -> bool:
    value = sympy.sympify(value) if isinstance(value, (int, float)) else value
    return isinstance(value, sympy.Number) and bool(abs(value) > limit)


def _digits(base, exponent, sympy) -> float:
    """Roughly how many digits a rational base to a number's power has (0 where either is not a number)."""
    base, exponent = sympy.sympify(base), sympy.sympify(exponent)
    if not (base.is_Rational and exponent.is_Number):
        return 0
    return abs(float(exponent)) * (len(str(abs(base.p))) + len(str(base.q)))


def same(a, b) -> bool:
    """Equal as SymPy builds them, element by element in containers (sets and dicts as such)."""
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, frozenset) and isinstance(b, frozenset):
        return a == b
    if isinstance(a, (tuple, list, dict, frozenset)) or isinstance(b, (tuple, list, dict, frozenset)):
        return False
    try:
        if a == b:
            return True
        if getattr(a, "is_Number", False) and getattr(b, "is_Number", False) and a.is_finite and b.is_finite:
            return bool(abs(a - b) <= 1e-9 * max(1, abs(b)))   # 0.5 is 1/2
        return False
    except TypeError:
        return False
