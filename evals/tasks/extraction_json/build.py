"""Build test.jsonl: BibTeX entries from the READMEs of lm-eval's task folders (the installed `lm_eval`
package), each with the title, year and first author's surname that the entry itself gives.

    python evals/tasks/extraction_json/build.py

An entry is kept only where those three are read from it without judgement: its `title`, `year` (four digits)
and `author` fields are present; the title, once its braces are dropped, has no LaTeX command or math; the
first author is written "Surname, Given" or "Given Surname" with plain words (no braces, accents written as
LaTeX, "and others" alone); the entry is at most MAX_CHARS long (a prompt that fits a 2048-token context).
Entries with the same title are kept once. Items are ordered by a hash of their
key, so that the first N (a recipe's `limit: N`) are a fair sample of the papers.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIELDS = ("title", "year", "first_author_surname")
SCHEMA = {"type": "object", "required": list(FIELDS),
          "properties": {"title": {"type": "string"}, "year": {"type": "integer"},
                         "first_author_surname": {"type": "string"}}}
ENTRY_START = re.compile(r"@(\w+)\s*\{\s*([^,\s]+)\s*,")
FIELD = re.compile(r"\s*(\w+)\s*=\s*")
MAX_CHARS = 1200
PLAIN_NAME = re.compile(r"^[A-Za-z][A-Za-z'\-]*(?: [A-Za-z][A-Za-z'.\-]*)*$")


def _balanced(text: str, start: int) -> int:
    """The index just past the brace group opening at text[start]."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return i + 1
    raise ValueError("unbalanced braces")


def entries(readme: str):
    """(raw entry text, {field: value}) of each BibTeX entry in a README."""
    for match in ENTRY_START.finditer(readme):
        open_at = readme.index("{", match.start())
        try:
            end = _balanced(readme, open_at)
        except ValueError:
            continue
        raw, fields, at = readme[match.start():end], {}, match.end()
        while (field := FIELD.match(readme, at)) and at < end - 1:
            at = field.end()
            if readme[at] == "{":
                stop = _balanced(readme, at)
                value = readme[at + 1:stop - 1]
            elif readme[at] == '"':
                stop = readme.index('"', at + 1) + 1
                value = readme[at + 1:stop - 1]
            else:
                stop = re.compile(r"[,}\n]").search(readme, at).start()
                value = readme[at:stop].strip()
            fields[field.group(1).lower()] = value
            at = stop
            comma = re.compile(r"\s*,?").match(readme, at)
            at = comma.end()
        yield raw, fields


def gold(fields: dict) -> dict | None:
    title = " ".join(fields.get("title", "").replace("{", "").replace("}", "").split())
    year = fields.get("year", "").strip("{} ")
    authors = " ".join(fields.get("author", "").split()).split(" and ")
    if not title or "\\" in title or "$" in title or not re.fullmatch(r"\d{4}", year) or not authors[0]:
        return None
    first = authors[0]
    surname = first.split(",")[0].strip() if "," in first else first.split(" ")[-1]
    if first.count(",") > 1 or not PLAIN_NAME.fullmatch(first.replace(",", "")) or first.lower() == "others":
        return None
    if not re.fullmatch(r"[A-Za-z][A-Za-z'\-]+", surname):
        return None
    return {"title": title, "year": int(year), "first_author_surname": surname}


def build() -> list[dict]:
    import lm_eval

    tasks = Path(lm_eval.__file__).parent / "tasks"
    version = importlib.metadata.version("lm_eval")
    items, titles = [], set()
    for readme in sorted(tasks.rglob("README.md")):
        for raw, fields in entries(readme.read_text(encoding="utf-8", errors="replace")):
            answer = gold(fields)
            if answer is None or answer["title"].lower() in titles or len(raw) > MAX_CHARS:
                continue
            titles.add(answer["title"].lower())
            items.append({"id": f"{readme.parent.relative_to(tasks)}:{raw.split('{', 1)[1].split(',', 1)[0]}",
                          "text": raw.strip(), "gold": answer, "schema": SCHEMA, "lm_eval": version})
    return sorted(items, key=lambda item: hashlib.sha256(item["id"].encode()).hexdigest())


if __name__ == "__main__":
    rows = build()
    with open(HERE / "test.jsonl", "w") as f:
        f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    print(f"{len(rows)} items")
