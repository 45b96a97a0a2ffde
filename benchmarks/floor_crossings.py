"""Where the roof (quant/) hands a recipe down to a stage (floor 1) and takes the answer back up: every call site
in quant/'s validation (quant/validate.py, quant/recipe_checks.py) into a stage's module, and every call site in
quant/sweep.py into a stage's module with `recipe` in its arguments, each counted as one climb back up (the
call returns to the roof). A call into a stage's `validate` module is the stage's own check; any other is the
roof reaching into the stage's internals. Calls are found in the syntax tree: a name imported from a stage's
module (at the top or inside a function), called as `name(...)` or `module.name(...)`.

Usage: python benchmarks/floor_crossings.py [--root DIR]   (DIR: a checkout; default this one)
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

STAGES = ("quantize", "evals", "perf", "reports", "demo")
VALIDATION = ("quant/validate.py", "quant/recipe_checks.py")
SWEEP = "quant/sweep.py"


def imported_names(tree: ast.AST) -> dict[str, str]:
    """{local name: the stage module it comes from} for every import of a stage's module in the file."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                node.module.split(".")[0] in STAGES:
            for alias in node.names:
                names[alias.asname or alias.name] = node.module
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in STAGES:
                    names[alias.asname or alias.name] = alias.name
    return names


def dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and (head := dotted(node.value)) is not None:
        return f"{head}.{node.attr}"
    return None


def crossings(path: Path, only_with_recipe: bool) -> list[tuple[int, str, str]]:
    """(line, callee, the stage module it lives in) per call site into a stage."""
    tree = ast.parse(path.read_text(), str(path))
    names = imported_names(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or (callee := dotted(node.func)) is None:
            continue
        module = next((names[n] for n in sorted(names, key=len, reverse=True)
                       if callee == n or callee.startswith(n + ".")), None)
        if module is None:
            continue
        if callee.startswith(module + "."):
            module = ".".join([module] + callee[len(module) + 1:].split(".")[:-1])
        arguments = node.args + [k.value for k in node.keywords]
        if only_with_recipe and not any(isinstance(n, ast.Name) and n.id == "recipe"
                                        for a in arguments for n in ast.walk(a)):
            continue
        found.append((node.lineno, callee, module))
    return sorted(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    root = parser.parse_args().root
    total = internal = 0
    for name, with_recipe in [(f, False) for f in VALIDATION] + [(SWEEP, True)]:
        for line, callee, module in crossings(root / name, with_recipe):
            own = module.split(".")[-1] == "validate"
            total += 1
            internal += not own
            print(f"{name}:{line}: {callee} ({module}{'' if own else ': stage internals'})")
    print(f"climbs back up: {total}, of which from stage internals: {internal}")


if __name__ == "__main__":
    main()
