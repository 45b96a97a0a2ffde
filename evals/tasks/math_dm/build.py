"""Build test.jsonl: school-level questions from DeepMind's mathematics_dataset generator, each answered by one
number, at its three training difficulties.

    python -m venv /tmp/mdvenv && /tmp/mdvenv/bin/pip install mathematics_dataset==1.0.1
    /tmp/mdvenv/bin/python evals/tasks/math_dm/build.py

(mathematics_dataset brings sympy and numpy; the file here was built with sympy 1.14.0 and numpy 2.4.6, which
each item records.) Nothing of this project is imported: the generator runs in its own environment. The same
versions and SEED give the same file, byte for byte; the build prints its sha256.

The package was written against older SymPy and NumPy: two names it imports moved (`base_solution_linear` now
lives in `sympy.solvers.diophantine.diophantine`; `np.object` is `object`). `_compat()` puts them where the
package looks; nothing else of it is changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 20261207
PER_MODULE_AND_LEVEL = 10
LEVELS = ("train-easy", "train-medium", "train-hard")   # the generator's entropy thirds
NUMBER = re.compile(r"-?\d+(\.\d+)?(/\d+)?")
# Questions whose answer is one number, each a single skill (no `_composed` chains of several modules):
MODULES = (
    "algebra__linear_1d", "algebra__linear_2d",
    "arithmetic__add_or_sub", "arithmetic__add_sub_multiple", "arithmetic__div", "arithmetic__mixed",
    "arithmetic__mul", "arithmetic__mul_div_multiple",
    "comparison__closest", "comparison__kth_biggest",
    "numbers__div_remainder", "numbers__gcd", "numbers__lcm",
    "polynomials__evaluate",
)


def _compat():
    import numpy
    import sympy.solvers.diophantine  # noqa: F401  (the module, which `sympy.solvers.diophantine` names as a function)
    from sympy.solvers.diophantine.diophantine import base_solution_linear

    sys.modules["sympy.solvers.diophantine"].base_solution_linear = base_solution_linear
    if "object" not in numpy.__dict__:
        numpy.object = object


def build() -> list[dict]:
    import numpy
    import sympy

    _compat()
    from importlib.metadata import version

    from mathematics_dataset import generate
    from mathematics_dataset.modules import modules

    generate.FLAGS(["build"])   # the generator's question/answer length limits read its absl flags
    versions = {"mathematics_dataset": version("mathematics_dataset"), "sympy": sympy.__version__,
                "numpy": numpy.__version__}
    thirds = {level: generate._make_entropy_fn(i, len(LEVELS)) for i, level in enumerate(LEVELS)}
    items = []
    for level in LEVELS:
        flat = generate._filter_and_flatten(modules.train(thirds[level]))
        for name in MODULES:
            random.seed(f"{SEED}/{level}/{name}")
            numpy.random.seed(int(hashlib.sha256(f"{SEED}/{level}/{name}".encode()).hexdigest()[:8], 16))
            for n in range(PER_MODULE_AND_LEVEL):
                problem = _open_question(generate, flat[name])
                items.append({"id": f"{level}/{name}/{n}", "module": name, "level": level,
                              "question": str(problem.question), "answer": str(problem.answer), **versions})
    return sorted(items, key=_round_robin)


def _round_robin(item: dict) -> tuple:
    """Each module and level's first question, in an order fixed by a hash, then each one's second...: the first
    N items (a recipe's `limit: N`) cover the modules and levels evenly."""
    level, module, n = item["id"].split("/")
    return int(n), hashlib.sha256(f"{level}/{module}".encode()).hexdigest()


def _open_question(generate, module):
    """The module's next question whose answer is a number: comparison's modules also ask some as multiple
    choice, answered by a letter, and this task is open-ended."""
    while True:
        problem, _ = generate.sample_from_module(module)
        if NUMBER.fullmatch(str(problem.answer)):
            return problem


if __name__ == "__main__":
    if os.environ.get("PYTHONHASHSEED") != "0":   # sets of SymPy's are ordered by string hashes
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"})
    rows = build()
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    (HERE / "test.jsonl").write_text(text)
    print(f"{len(rows)} items, {len(text.encode())} bytes, sha256 {hashlib.sha256(text.encode()).hexdigest()}")
