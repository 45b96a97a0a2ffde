"""Builds test.jsonl of extraction_mc: real package metadata records (the core metadata, PEP 566/643, that
installed Python distributions carry in their METADATA files) and the JSON of three of their fields, against
three near misses that each put another value *found in the same record* into one field.

A record is the metadata's header lines as the distribution wrote them, less the long description, the
classifiers, project URLs and the dependencies of extras (to keep prompts short); a distribution qualifies
when it has Name, Version and Requires-Python. The answer is
    {"name": <Name>, "version": <Version>, "requires_python": <Requires-Python>}
Near misses (one field each; every value appears in the record's text):
    name             the name of one of its dependencies (Requires-Dist)
    version          another version number in the record: Metadata-Version, or one a dependency pins
    requires_python  a dependency's version specifier
A near miss is provably wrong: its name differs after PEP 503 normalisation, its version compares unequal
(PEP 440), its specifier set is a different set. Per record, the candidates are put in a seeded order that
takes the fields in turn; the first three are used; a record with fewer is left out. Records are read from
the site-packages folders given (default: this Python's), first found wins per name, sorted by name.

    python evals/tasks/extraction_mc/build.py SITE_PACKAGES_DIR [...]   # writes test.jsonl beside this file
    python evals/tasks/extraction_mc/build.py --limit 5 [DIR ...]       # print 5 items, write nothing
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

HERE = Path(__file__).resolve().parent
WRONG_CHOICES = 3
FIELDS = ("name", "version", "requires_python")
DROPPED_HEADERS = {"description", "classifier", "project-url", "provides-extra", "description-content-type",
                   "license-file", "platform", "dynamic"}
MAX_LINE_CHARS = 120
MAX_REQUIRES = 12


def record_lines(meta) -> list[str]:
    """The metadata's header lines worth showing, in the distribution's own order."""
    lines, requires = [], 0
    for key, value in meta.items():
        value = str(value).strip()
        if key.lower() in DROPPED_HEADERS or not value or "\n" in value or len(value) > MAX_LINE_CHARS:
            continue
        if key.lower() == "requires-dist":
            if "extra ==" in value or requires == MAX_REQUIRES:
                continue
            requires += 1
        lines.append(f"{key}: {value}")
    return lines


def _requirements(lines: list[str]) -> list[Requirement]:
    out = []
    for line in lines:
        if line.startswith("Requires-Dist: "):
            try:
                out.append(Requirement(line.removeprefix("Requires-Dist: ")))
            except InvalidRequirement:
                pass
    return out


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def _specifier(text: str) -> SpecifierSet | None:
    try:
        return SpecifierSet(text)
    except InvalidSpecifier:
        return None


def near_misses(gold: dict, lines: list[str]) -> list[tuple[str, str]]:
    """(field, value) candidates: values from the record's own text that are provably not the field's."""
    requires = _requirements(lines)
    out = []
    for req in requires:
        if canonicalize_name(req.name) != canonicalize_name(gold["name"]):
            out.append(("name", req.name))
    versions = [line.removeprefix("Metadata-Version: ") for line in lines if line.startswith("Metadata-Version: ")]
    versions += [spec.version for req in requires for spec in req.specifier if _version(spec.version)]
    for text in versions:
        if (v := _version(text)) is not None and v != _version(gold["version"]):
            out.append(("version", text))
    gold_spec = _specifier(gold["requires_python"])
    for req in requires:
        text = str(req.specifier)
        if text and text in " ".join(lines) and (spec := _specifier(text)) is not None and spec != gold_spec:
            out.append(("requires_python", text))
    unique = list(dict.fromkeys(out))
    return [(f, v) for f, v in unique if v != gold[f]]


def ordered(candidates: list[tuple[str, str]], seed: str) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    by_field = {f: [c for c in candidates if c[0] == f] for f in FIELDS}
    for group in by_field.values():
        rng.shuffle(group)
    out = []
    while any(by_field.values()):
        for f in FIELDS:
            if by_field[f]:
                out.append(by_field[f].pop(0))
    return out


def answer(fields: dict) -> str:
    return json.dumps({f: fields[f] for f in FIELDS})


def build_item(meta) -> dict | None:
    gold = {"name": meta.get("Name"), "version": meta.get("Version"), "requires_python": meta.get("Requires-Python")}
    if not all(gold.values()) or _version(gold["version"]) is None or _specifier(gold["requires_python"]) is None:
        return None
    lines = record_lines(meta)
    picked = ordered(near_misses(gold, lines), gold["name"])[:WRONG_CHOICES]
    if len(picked) < WRONG_CHOICES:
        return None
    label = random.Random("order:" + gold["name"]).randrange(WRONG_CHOICES + 1)
    choices = [answer(gold | {f: v}) for f, v in picked]
    edits = [f for f, _ in picked]
    choices.insert(label, answer(gold))
    edits.insert(label, None)
    return {"package": gold["name"], "record": "\n".join(lines), "choices": choices, "label": label,
            "edits": edits}


def records(paths: list[str] | None) -> list:
    seen = {}
    for dist in metadata.distributions(**({"path": paths} if paths else {})):
        name = dist.metadata.get("Name")
        if name and canonicalize_name(name) not in seen:
            seen[canonicalize_name(name)] = dist.metadata
    return [seen[k] for k in sorted(seen)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("site", nargs="*", help="site-packages folders to read (default: this Python's)")
    ap.add_argument("--limit", type=int, default=None, help="print the first N items, write nothing")
    args = ap.parse_args()
    found = records(args.site or None)
    items = [item for meta in found if (item := build_item(meta)) is not None]
    print(f"{len(items)} items from {len(found)} distributions", file=sys.stderr)
    if args.limit is not None:
        for item in items[:args.limit]:
            print(json.dumps(item))
        return
    with (HERE / "test.jsonl").open("w") as out:
        for item in items:
            out.write(json.dumps(item) + "\n")


if __name__ == "__main__":
    main()
