"""Rebuilds test.jsonl (the task's documents) and calibration.jsonl (calibration texts for real-model recipes,
from other modules than the test documents): prose docstrings (module, class, function) of CPython's standard
library (PSF licence).

Run with the Python whose library you want (the shipped file came from CPython 3.11.7):
    python evals/tasks/python_docs_ppl/build_corpus.py
A docstring qualifies when it is mostly prose (few lines that look like code or tables) and between
MIN_CHARS and MAX_CHARS long, so every document fits a 2048-token context with room to spare. The longest
qualifying docstring of each module is kept (one per module, so documents are not near-duplicates), then
the DOCUMENTS longest of those.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import sysconfig
from pathlib import Path

MIN_CHARS, MAX_CHARS, DOCUMENTS = 800, 4000, 60
CALIBRATION_MIN_CHARS, CALIBRATION_TEXTS = 300, 128
CODE_LINE = re.compile(r"^\s*(>>>|\.\.\.|[-=]{4,}|\w+\s*=|def |class |import |from \w+ import|\$ )")


def prose_share(text: str) -> float:
    lines = [line for line in text.splitlines() if line.strip()]
    codeish = sum(bool(CODE_LINE.match(line)) or line.startswith("        ") for line in lines)
    return 1 - codeish / max(len(lines), 1)


def docstrings(lib: Path, min_chars: int):
    for path in sorted(lib.rglob("*.py")):
        relative = path.relative_to(lib)
        if any(part in {"test", "tests", "idle_test", "site-packages", "lib2to3"} for part in relative.parts):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        documented = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        found = [doc.strip() for node in ast.walk(tree) if isinstance(node, documented)
                 and (doc := ast.get_docstring(node, clean=True))]
        found = [doc for doc in found if min_chars <= len(doc) <= MAX_CHARS and prose_share(doc) >= 0.9]
        if found:
            yield ".".join(relative.with_suffix("").parts), max(found, key=len)


def main() -> None:
    lib = Path(sysconfig.get_paths()["stdlib"])
    chosen = sorted(docstrings(lib, MIN_CHARS), key=lambda item: -len(item[1]))[:DOCUMENTS]
    test_modules = {module for module, _ in chosen}
    calibration = [(module, doc) for module, doc in docstrings(lib, CALIBRATION_MIN_CHARS)
                   if module not in test_modules]
    calibration = sorted(calibration, key=lambda item: -len(item[1]))[:CALIBRATION_TEXTS]
    for name, documents in (("test.jsonl", chosen), ("calibration.jsonl", calibration)):
        out = Path(__file__).with_name(name)
        with out.open("w") as f:
            for module, doc in sorted(documents):
                f.write(json.dumps({"module": module, "text": doc}) + "\n")
        print(f"{len(documents)} documents, {sum(len(d) for _, d in documents)} characters from Python "
              f"{sys.version.split()[0]} -> {out}")


if __name__ == "__main__":
    main()
