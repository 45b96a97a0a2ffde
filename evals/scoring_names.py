"""Where each name a code task's tests read comes from when they run (evals/sandbox_harness.py builds the
tests' namespace from this plan; the program's other names never reach the tests).

A name the tests read and do not bind themselves is, in this order:
- a declared entry point (HumanEval's `entry_point`, the functions and classes MBPP's reference code defines):
  the program's, as a function whose results must be plain values;
- bound by the prelude (the task's own text run before the program: HumanEval's prompt with its helpers and
  imports, MBPP's `test_setup_code`): the prelude's;
- a builtin: the builtin, as it was before the program ran;
- a standard-library module: that module, imported by the harness before the program ran;
- anything else: the program's (a function whose results must be plain values, or itself a plain value).

The parser runs under a lock: CPython 3.11's ast module keeps its recursion count per interpreter, not per
thread, so two threads parsing at once (code scoring runs programs from a pool) can make either raise
`SystemError: AST constructor recursion depth mismatch`. A plan is remembered by its arguments (the same tests
come back for every variant).
"""

from __future__ import annotations

import ast
import builtins
import symtable
import sys
import threading
from functools import lru_cache

# Standard-library modules the harness never imports on a test's behalf (importing them has effects).
NOT_IMPORTED = frozenset({"this", "antigravity"})
_parsing = threading.Lock()


def parse(code: str, mode: str = "exec") -> ast.AST:
    """ast.parse, one thread at a time (see above)."""
    with _parsing:
        return ast.parse(code, mode=mode)


def _tables(table: symtable.SymbolTable):
    yield table
    for child in table.get_children():
        yield from _tables(child)


def free_names(tests: str) -> list[str]:
    """The global names the tests read and never bind (so the namespace they run in must provide them)."""
    try:
        with _parsing:
            top = symtable.symtable(tests, "<tests>", "exec")
    except (SyntaxError, ValueError):
        return []
    bound, read = set(), set()
    for table in _tables(top):
        for symbol in table.get_symbols():
            at_module = table is top or symbol.is_global()
            if at_module and (symbol.is_assigned() or symbol.is_imported() or symbol.is_namespace()):
                bound.add(symbol.get_name())
            if symbol.is_referenced() and (table is top or symbol.is_global()):
                read.add(symbol.get_name())
    return sorted(read - bound)


def imported_modules(tests: str) -> list[str]:
    """The modules the tests import (absolute imports, by their full names)."""
    try:
        tree = parse(tests)
    except (SyntaxError, ValueError):
        return []
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return sorted(found)


def defined_names(code: str) -> tuple[list[str], list[str]]:
    """(functions, classes) a reference solution defines at its top level."""
    try:
        tree = parse(code)
    except (SyntaxError, ValueError):
        return [], []
    functions = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return functions, [n.name for n in tree.body if isinstance(n, ast.ClassDef)]


@lru_cache(maxsize=4096)
def plan(tests: str, entry_points: tuple[str, ...] = (), classes: tuple[str, ...] = ()) -> dict:
    """What the harness needs to build the tests' namespace: the names the tests read, which of them are the
    program's by declaration (functions; `classes` handed over as they are), and the standard-library modules
    to import before the program runs (those the tests import, and those they read without importing)."""
    free = free_names(tests)
    declared = set(entry_points) | set(classes)
    stdlib = [name for name in free if name in sys.stdlib_module_names and name not in declared
              and not hasattr(builtins, name)]
    modules = sorted(set(imported_modules(tests) + stdlib) - NOT_IMPORTED)
    return {"free": free, "entry_points": sorted(set(entry_points)), "classes": sorted(set(classes)),
            "modules": modules}
