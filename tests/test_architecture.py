"""The import rule of ARCHITECTURE.md, checked over every module of the project (an AST walk, so imports
inside functions count too): each top-level package sits on a floor and imports only from its own floor
or below. core/ is the ground; the stages stand on it; quant/ (CLI, sweep, history) is the roof."""

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
