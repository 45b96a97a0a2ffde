"""Build test.jsonl from math_mc's: each worked example from SymPy's documentation, asked open-ended (no
choices), with the answer SymPy prints.

    python evals/tasks/math_open/build.py

An example is kept where that answer is a value evals/sympy_values.py reads (all but a few: piecewise
conditions and undefined functions are not read). Items are ordered by a hash of their id, so that the first N
(a recipe's `limit: N`) are a fair sample of the modules.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "math_mc" / "test.jsonl"


def build() -> list[dict]:
    from evals.sympy_values import Unreadable, read_value

    items = []
    for line in SOURCE.read_text().splitlines():
        row = json.loads(line)
        answer = row["choices"][row["label"]]
        try:
            read_value(answer)
        except Unreadable:
            continue
        items.append({"id": row["id"], "module": row["module"], "prompt": row["prompt"], "answer": answer,
                      "sympy": row["sympy"]})
    return sorted(items, key=lambda item: hashlib.sha256(item["id"].encode()).hexdigest())


if __name__ == "__main__":
    rows = build()
    with open(HERE / "test.jsonl", "w") as f:
        f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    print(f"{len(rows)} items")
