"""Builds test.jsonl of math_mc: worked examples from SymPy's own documentation (its docstrings' doctests),
each a math question with the answer SymPy prints, against three near misses that are provably wrong.

An example qualifies when it is one call of a public SymPy function (`factorint(2000)`, `binomial(5, 2)`,
`diff(x**3, x)`, `summation(k, (k, 1, n))`) from the mathematical modules below, and its printed answer is
one short line. The gold answer is checked by running the example (with the setup lines before it in the
same docstring) and comparing the output as doctest does. A near miss changes one token of the answer:
an integer by 1 or 2 (constant), `+`/`-`, `*`/`/` or `**` (operator), and counts only when SymPy shows it is
a different value: evaluated in the example's namespace, SymPy prints it exactly as it reads (no choice
gives itself away by a form SymPy never prints, such as `1*x` or `x**1`) and `simplify(near_miss - answer)
!= 0` (element by element for tuples, lists, sets and dicts). Per example, the candidate edits are put in a seeded order taking the
kinds in turn; the first three that pass are the wrong choices; an example with fewer is left out.

    python evals/tasks/math_mc/build.py            # writes test.jsonl beside this file
    python evals/tasks/math_mc/build.py --limit 20 # the first 20 qualifying examples, printed, nothing written
"""

from __future__ import annotations

import argparse
import doctest
import importlib
import io
import json
import pkgutil
import random
import re
import signal
import sys
import tokenize
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
WRONG_CHOICES = 3
MODULES = ("sympy.ntheory", "sympy.functions.combinatorial", "sympy.functions.elementary", "sympy.simplify",
           "sympy.integrals", "sympy.series", "sympy.solvers", "sympy.calculus", "sympy.concrete",
           "sympy.polys.polytools", "sympy.core.function", "sympy.core.numbers", "sympy.core.power",
           "sympy.core.mul", "sympy.core.add", "sympy.discrete")
CALL = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\((.*)\)$")
MAX_ANSWER_CHARS = 40
MAX_SETUP_LINES = 8
OPERATORS = {"+": "-", "-": "+", "*": "/", "/": "*", "**": "*"}
KINDS = ("constant", "operator")


class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout


def modules() -> list[str]:
    names = []
    for root in MODULES:
        pkg = importlib.import_module(root)
        names.append(root)
        if hasattr(pkg, "__path__"):
            names += [m.name for m in pkgutil.walk_packages(pkg.__path__, root + ".")
                      if ".tests" not in m.name and ".benchmarks" not in m.name]
    return sorted(set(names))


def public_function(source: str, public: set[str]) -> str | None:
    """The name when `source` is one call `name(...)` of a public SymPy function (a plain function, or a
    mathematical function such as binomial or sin; not a constructor such as Sum or Interval)."""
    match = CALL.match(source.strip())
    if not match or match.group(1) not in public or not _closes_at_end(source.strip()):
        return None
    return match.group(1) if _is_function(match.group(1)) else None


def _closes_at_end(source: str) -> bool:
    """Whether the parenthesis opened after the name is the one that closes the source."""
    depth = 0
    for i, char in enumerate(source):
        depth += char == "("
        depth -= char == ")"
        if depth == 0 and char == ")":
            return i == len(source) - 1
    return False


def _is_function(name: str) -> bool:
    import inspect

    import sympy
    obj = getattr(sympy, name)
    return inspect.isfunction(obj) or (inspect.isclass(obj) and issubclass(obj, sympy.Function))


def examples(public: set[str]):
    """(module, docstring name, setup sources, example) for each qualifying example, in a fixed order."""
    finder = doctest.DocTestFinder(exclude_empty=True)
    seen = set()
    for name in modules():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                module = importlib.import_module(name)
        except Exception:
            continue
        for test in sorted(finder.find(module), key=lambda t: t.name):
            setup = []
            for ex in test.examples:
                source, want = ex.source.strip(), ex.want.strip()
                if not want:
                    setup.append(source)
                    continue
                if ("\n" in source or "\n" in want or len(want) > MAX_ANSWER_CHARS
                        or want in ("True", "False", "None") or want == source
                        or not public_function(source, public)
                        or (test.name, source) in seen):
                    continue
                seen.add((test.name, source))
                yield name, test.name, setup[-MAX_SETUP_LINES:], source, want


def run_example(setup: list[str], source: str, want: str, timeout_s: int = 5):
    """-> (namespace, value) when the example prints `want` as doctest checks it, else None."""
    namespace: dict = {}
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout_s)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for line in setup:
                exec(compile(line, "<setup>", "single"), namespace)
            value = eval(compile(source, "<example>", "eval"), namespace)
    except BaseException:
        return None
    finally:
        signal.alarm(0)
    checker = doctest.OutputChecker()
    printed = repr(value) + "\n"
    return (namespace, value) if checker.check_output(want + "\n", printed, doctest.NORMALIZE_WHITESPACE) else None


def candidate_edits(want: str) -> list[tuple[str, str]]:
    """(kind, near miss) for every one-token edit of the printed answer."""
    offsets = [0]
    for line in want.splitlines(keepends=True):
        offsets.append(offsets[-1] + len(line))
    out = []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(want).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return []
    for tok in tokens:
        at = offsets[tok.start[0] - 1] + tok.start[1]
        text = tok.string

        def edited(new: str) -> str:
            return want[:at] + new + want[at + len(text):]
        if tok.type == tokenize.NUMBER and text.isdigit():
            value = int(text)
            for step in (1, -1, 2, -2):
                if value + step >= 0:
                    out.append(("constant", edited(str(value + step))))
        elif tok.type == tokenize.OP and text in OPERATORS:
            out.append(("operator", edited(OPERATORS[text])))
    return out


def _differs(a, b) -> bool:
    from sympy import Basic, simplify, sympify
    if isinstance(a, dict) or isinstance(b, dict):
        if not (isinstance(a, dict) and isinstance(b, dict)) or set(map(str, a)) != set(map(str, b)):
            return True
        by_key = {str(k): v for k, v in b.items()}
        return any(_differs(v, by_key[str(k)]) for k, v in a.items())
    if isinstance(a, (list, tuple, set, frozenset)) or isinstance(b, (list, tuple, set, frozenset)):
        if type(a) is not type(b) or len(a) != len(b):
            return True
        if isinstance(a, (set, frozenset)):
            return {str(x) for x in a} != {str(x) for x in b}
        return any(_differs(x, y) for x, y in zip(a, b))
    a, b = sympify(a), sympify(b)
    if not isinstance(a, Basic) or not isinstance(b, Basic):
        return a != b
    if a.is_Relational or b.is_Relational or a.is_Boolean or b.is_Boolean:
        return a != b
    return simplify(a - b) != 0


def provably_wrong(namespace: dict, value, near_miss: str) -> bool:
    """True when the near miss, evaluated in the example's namespace, is a value SymPy prints exactly as the
    near miss reads (so no choice gives itself away by its form) and SymPy shows it is not `value`."""
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(5)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            other = eval(compile(near_miss, "<near miss>", "eval"), dict(namespace))
            return repr(other) == near_miss and bool(_differs(value, other))
    except BaseException:
        return False
    finally:
        signal.alarm(0)


def ordered(edits: list[tuple[str, str]], seed: str) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    by_kind = {kind: [e for e in edits if e[0] == kind] for kind in KINDS}
    for group in by_kind.values():
        rng.shuffle(group)
    out = []
    while any(by_kind.values()):
        for kind in KINDS:
            if by_kind[kind]:
                out.append(by_kind[kind].pop(0))
    return out


def prompt_of(setup: list[str], source: str) -> str:
    return "".join(f">>> {line}\n" for line in setup + [source])


def build_item(module: str, docname: str, setup: list[str], source: str, want: str) -> dict | None:
    ran = run_example(setup, source, want)
    if ran is None:
        return None
    namespace, value = ran
    chosen, seen = [], {want}
    for kind, near_miss in ordered(candidate_edits(want), f"{docname}:{source}"):
        if near_miss in seen:
            continue
        seen.add(near_miss)
        if provably_wrong(namespace, value, near_miss):
            chosen.append((kind, near_miss))
            if len(chosen) == WRONG_CHOICES:
                break
    if len(chosen) < WRONG_CHOICES:
        return None
    label = random.Random(f"order:{docname}:{source}").randrange(WRONG_CHOICES + 1)
    choices = [text for _, text in chosen]
    kinds = [kind for kind, _ in chosen]
    choices.insert(label, want)
    kinds.insert(label, None)
    return {"id": f"{docname}:{source}", "module": module, "prompt": prompt_of(setup, source),
            "choices": choices, "label": label, "edits": kinds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=None, help="first N qualifying examples; print, write nothing")
    args = ap.parse_args()
    import sympy
    public = set(sympy.__all__)
    items, tried = [], 0
    for found in examples(public):
        tried += 1
        if (item := build_item(*found)) is not None:
            items.append(item | {"sympy": sympy.__version__})
        if args.limit is not None and len(items) >= args.limit:
            break
    print(f"{len(items)} items from {tried} qualifying examples (SymPy {sympy.__version__})", file=sys.stderr)
    if args.limit is not None:
        for item in items:
            print(json.dumps(item))
        return
    with (HERE / "test.jsonl").open("w") as out:
        for item in items:
            out.write(json.dumps(item) + "\n")


if __name__ == "__main__":
    main()
