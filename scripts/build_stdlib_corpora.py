"""Rebuilds the texts the project takes from CPython's standard library (PSF licence), all from one place so they
stay disjoint:
  evals/tasks/python_docs_ppl/test.jsonl           the python_docs_ppl task's documents (prose docstrings)
  quantize/calibration_sets/stdlib_prose.jsonl     calibration source "stdlib-prose": prose docstrings of
                                                   other modules than the task's documents
  quantize/calibration_sets/stdlib_code.jsonl      calibration source "stdlib-code": source code, in chunks of
                                                   whole top-level statements, of other modules than the task's

Run with the Python whose library you want (the shipped files came from CPython 3.11.7):
    python scripts/build_stdlib_corpora.py
A docstring qualifies when it is mostly prose (few lines that look like code or tables) and between
MIN_CHARS and MAX_CHARS long, so every document fits a 2048-token context with room to spare. The longest
qualifying docstring of each module is kept (one per module, so documents are not near-duplicates), then
the DOCUMENTS longest of those. Code chunks are taken a module at a time, in turn, so CODE_TEXTS chunks cover
as many modules as there are.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import sysconfig
from itertools import chain, zip_longest
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TASK_DOCUMENTS = REPO / "evals/tasks/python_docs_ppl/test.jsonl"
PROSE_SET = REPO / "quantize/calibration_sets/stdlib_prose.jsonl"
CODE_SET = REPO / "quantize/calibration_sets/stdlib_code.jsonl"

MIN_CHARS, MAX_CHARS, DOCUMENTS = 800, 4000, 60
CALIBRATION_MIN_CHARS, CALIBRATION_TEXTS = 300, 128
# About 1000 tokens of code at most: a chunk fills a 1024-token calibration sample without being cut much.
CODE_MIN_CHARS, CODE_MAX_CHARS, CODE_TEXTS = 1000, 3500, 512
CODE_LINE = re.compile(r"^\s*(>>>|\.\.\.|[-=]{4,}|\w+\s*=|def |class |import |from \w+ import|\$ )")
SKIPPED = {"test", "tests", "idle_test", "site-packages", "lib2to3"}
NOT_CODE = {"encodings", "pydoc_data"}   # generated tables and one huge string: data, not code people write


def prose_share(text: str) -> float:
    lines = [line for line in text.splitlines() if line.strip()]
    codeish = sum(bool(CODE_LINE.match(line)) or line.startswith("        ") for line in lines)
    return 1 - codeish / max(len(lines), 1)


def modules(lib: Path):
    """(dotted module name, source, syntax tree) of every parsable library module outside the test suites."""
    for path in sorted(lib.rglob("*.py")):
        relative = path.relative_to(lib)
        if any(part in SKIPPED for part in relative.parts):
            continue
        try:
            source = path.read_text(encoding="utf-8")
            tree = ast.parse(source)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        yield ".".join(relative.with_suffix("").parts), source, tree


def docstrings(lib: Path, min_chars: int):
    for module, _, tree in modules(lib):
        documented = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        found = [doc.strip() for node in ast.walk(tree) if isinstance(node, documented)
                 and (doc := ast.get_docstring(node, clean=True))]
        found = [doc for doc in found if min_chars <= len(doc) <= MAX_CHARS and prose_share(doc) >= 0.9]
        if found:
            yield module, max(found, key=len)


def code_chunks(source: str, tree: ast.Module) -> list[str]:
    """The module's text cut between top-level statements into chunks of CODE_MIN_CHARS to CODE_MAX_CHARS
    (a statement longer than that is cut between its lines)."""
    lines = source.splitlines(keepends=True)
    starts = [min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1 for node in tree.body]
    blocks = ["".join(lines[a:b]) for a, b in zip([0] + starts[1:], starts[1:] + [len(lines)])] if starts else []
    pieces = list(chain.from_iterable(_cut(block) for block in blocks))
    chunks, current = [], ""
    for piece in pieces:
        if current and len(current) + len(piece) > CODE_MAX_CHARS:
            chunks.append(current)
            current = ""
        current += piece
    chunks.append(current)
    return [chunk.strip("\n") + "\n" for chunk in chunks if len(chunk.strip()) >= CODE_MIN_CHARS]


def _cut(block: str) -> list[str]:
    if len(block) <= CODE_MAX_CHARS:
        return [block]
    pieces, current = [], ""
    for line in block.splitlines(keepends=True):
        if current and len(current) + len(line) > CODE_MAX_CHARS:
            pieces.append(current)
            current = ""
        current += line
    return pieces + [current]


def code_set(lib: Path, excluded: set[str]) -> list[tuple[str, str]]:
    per_module = [[(module, chunk) for chunk in code_chunks(source, tree)] for module, source, tree in modules(lib)
                  if module not in excluded and module.split(".")[0] not in NOT_CODE]
    in_turn = (item for row in zip_longest(*per_module) for item in row if item is not None)
    return [item for item, _ in zip(in_turn, range(CODE_TEXTS))]


def write(path: Path, documents: list[tuple[str, str]], keep_order: bool = False) -> None:
    with path.open("w") as f:
        for module, text in documents if keep_order else sorted(documents):
            f.write(json.dumps({"module": module, "text": text}) + "\n")
    print(f"{len(documents)} texts, {sum(len(d) for _, d in documents)} characters from Python "
          f"{sys.version.split()[0]} -> {path.relative_to(REPO)}")


def main() -> None:
    lib = Path(sysconfig.get_paths()["stdlib"])
    chosen = sorted(docstrings(lib, MIN_CHARS), key=lambda item: -len(item[1]))[:DOCUMENTS]
    task_modules = {module for module, _ in chosen}
    prose = [(module, doc) for module, doc in docstrings(lib, CALIBRATION_MIN_CHARS) if module not in task_modules]
    prose = sorted(prose, key=lambda item: -len(item[1]))[:CALIBRATION_TEXTS]
    write(TASK_DOCUMENTS, chosen)
    write(PROSE_SET, prose)
    write(CODE_SET, code_set(lib, task_modules), keep_order=True)


if __name__ == "__main__":
    main()
