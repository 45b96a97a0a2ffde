"""The import rule of ARCHITECTURE.md, checked over every module of the project (an AST walk, so imports
inside functions count too): each top-level package sits on a floor and imports only from its own floor
or below. core/ is the ground; the stages stand on it; quant/ (CLI, sweep, history) is the roof. And no
file imports itself back through others: no import circle between files, within a package or across."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import REPO

# The one statement of the rule: a package may import packages on its own floor or a lower one, and
# core/ (floor 0) nothing of the project but itself. demo/ (the shipped demo model, its task generators and
# calibration texts) stands beside the stages: its generators write prompts the way evals/ scores them.
FLOORS = {"core": 0, "demo": 1, "quantize": 1, "evals": 1, "perf": 1, "reports": 1, "quant": 2}


def project_packages() -> set[str]:
    return {p.parent.name for p in REPO.glob("*/__init__.py") if p.parent.name != "tests"}


def imported_packages(path: Path, project: set[str]) -> set[str]:
    """The project's top-level packages one module imports (relative imports stay in its own package)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found |= {name.split(".")[0] for name in names} & project
    return found


def violations() -> list[str]:
    project = project_packages()
    found = []
    for package in sorted(project):
        for path in sorted((REPO / package).rglob("*.py")):
            for target in sorted(imported_packages(path, project) - {package}):
                if FLOORS[package] == 0 or FLOORS[target] > FLOORS[package]:
                    found.append(f"{path.relative_to(REPO)} imports {target}/ (floor {FLOORS[target]}) "
                                 f"from floor {FLOORS[package]}")
    return found


def test_every_package_has_a_floor():
    assert project_packages() - FLOORS.keys() == set(), "give the new package a floor in FLOORS (and ARCHITECTURE.md)"


def test_imports_point_down_only():
    assert violations() == []


def test_the_check_sees_an_upward_import(tmp_path):
    """The walk finds imports anywhere in a module, not only at its top."""
    module = tmp_path / "m.py"
    module.write_text("import os\ndef f():\n    from quant.sweep import run_sweep\n    import core.recipe as r\n")
    assert imported_packages(module, {"quant", "core"}) == {"quant", "core"}


def test_the_roofs_validation_asks_each_stage_its_own_check():
    """quant/validate.py and quant/recipe_checks.py collect each stage's check of its part of a recipe: of a
    stage they import its validate module alone, never its internals."""
    files = module_files()
    stages = {p for p, floor in FLOORS.items() if floor == 1}
    reached = {f"{name}: {module}" for name in ("quant/validate.py", "quant/recipe_checks.py")
               for module in imported_modules(REPO / name, files)
               if module.split(".")[0] in stages and module.split(".")[1:] != ["validate"]}
    assert reached == set()


def module_files() -> dict[str, Path]:
    """{"quantize.schemes": its file} for every module of the project's packages (a package: its __init__)."""
    files = {}
    for package in project_packages():
        for path in (REPO / package).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def imported_modules(path: Path, files: dict[str, Path]) -> set[str]:
    """The project's modules one file names in its imports: `from a.b import c` names a.b.c where that is a
    module, else a.b; `import a.b` names a.b (a name that is no file: the nearest package above it)."""
    def module(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    named = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            named += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            named += [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in files else node.module
                      for a in node.names]
    return {found for name in named if (found := module(name))}


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(graph.get(module, ())):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while not group or group[-1] != module:
                group.append(stack.pop())
            if len(group) > 1:
                circles.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(circles)


def test_no_import_circle_between_files():
    files = module_files()
    graph = {name: imported_modules(path, files) - {name} for name, path in files.items()}
    assert import_circles(graph) == []


def test_the_circle_check_sees_a_circle_through_a_function_import(tmp_path):
    (tmp_path / "a.py").write_text("from pkg.b import f\n")
    (tmp_path / "b.py").write_text("def f():\n    from pkg import a\n")
    (tmp_path / "c.py").write_text("import pkg.a\n")
    files = {f"pkg.{n}": tmp_path / f"{n}.py" for n in "abc"} | {"pkg": tmp_path / "__init__.py"}
    graph = {name: imported_modules(path, files) for name, path in files.items() if path.exists()}
    assert graph == {"pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}, "pkg.c": {"pkg.a"}}
    assert import_circles(graph) == [["pkg.a", "pkg.b"]]
