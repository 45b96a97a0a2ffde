"""Where `make test`'s time goes, from the junit XML files each of its pytest parts writes (runs/test-timings/
PART.xml): per part its wall time, its tests and the engine servers they started (tests/engine_starts.py; "-"
where the part did not count them), then the longest tests of all parts (set-up, call and teardown together: a
module fixture's sweep counts with the first test that uses it) and the engine servers per file. `--write-durations FILE` also writes each file's tests'
seconds as JSON ({file: {test: seconds}}, tests under half a second left out), the table from which `make test`
hands the longest files out first (tests/parallel.py reads tests/durations.json).

Usage: python benchmarks/suite_durations.py [DIR] [--top N] [--write-durations FILE]   (DIR: runs/test-timings)
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

# the order `make test` runs its parts in
PARTS = ("parallel", "integration", "engine_alone", "engine_exclusive", "exclusive_cpu", "browser")


@dataclass
class Test:
    part: str
    file: str
    name: str
    seconds: float
    engine_starts: int | None   # None: not counted in its part


@dataclass
class Part:
    name: str
    wall_s: float
    tests: list[Test]


def read_part(path: Path) -> Part:
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    tests = []
    for case in (case for suite in suites for case in suite.iter("testcase")):
        if case.find("skipped") is not None:
            continue
        counted = [int(p.get("value", "0")) for p in case.iter("property") if p.get("name") == "engine_starts"]
        starts = sum(counted) if counted else None
        module = case.get("classname", "")
        file = module.replace(".", "/") + ".py" if module else "?"
        tests.append(Test(path.stem, file, case.get("name", "?"), float(case.get("time", 0.0)), starts))
    return Part(path.stem, sum(float(s.get("time", 0.0)) for s in suites), tests)


def read_parts(folder: Path) -> list[Part]:
    files = sorted(folder.glob("*.xml"), key=lambda p: (PARTS.index(p.stem) if p.stem in PARTS else len(PARTS), p.stem))
    return [read_part(path) for path in files]


def _starts(tests: list[Test]) -> str:
    counted = [t.engine_starts for t in tests if t.engine_starts is not None]
    return str(sum(counted)) if counted else "-"


def render(parts: list[Part], top: int) -> str:
    lines = [f"{'part':<18}{'wall s':>8}{'tests':>7}{'engine starts':>15}"]
    for part in parts:
        lines.append(f"{part.name:<18}{part.wall_s:>8.0f}{len(part.tests):>7}{_starts(part.tests):>15}")
    every = [t for p in parts for t in p.tests]
    lines.append(f"{'all':<18}{sum(p.wall_s for p in parts):>8.0f}{len(every):>7}{_starts(every):>15}")
    lines += ["", f"the {min(top, len(every))} longest tests (seconds; set-up and teardown included)"]
    for t in sorted(every, key=lambda t: -t.seconds)[:top]:
        lines.append(f"{t.seconds:>8.1f}  {t.part:<16} {_starts([t]):>2} engine  {t.file}::{t.name}")
    per_file = Counter()
    for t in every:
        per_file[(t.part, t.file)] += t.engine_starts or 0
    lines += ["", "engine servers started, per file"]
    for (part, file), count in sorted(per_file.items(), key=lambda kv: (-kv[1], kv[0])):
        if count:
            lines.append(f"{count:>4}  {part:<16} {file}")
    return "\n".join(lines)


def durations(parts: list[Part], least_s: float = 0.5) -> dict[str, dict[str, float]]:
    """{file: {test: seconds}} over all parts, every file that ran a test listed (a file measured, even if all
    its tests were quick, is known to be short)."""
    table: dict[str, dict[str, float]] = {}
    for t in (t for p in parts for t in p.tests):
        tests = table.setdefault(t.file, {})
        if t.seconds >= least_s:
            tests[t.name] = round(tests.get(t.name, 0.0) + t.seconds, 1)
    return {file: dict(sorted(tests.items())) for file, tests in sorted(table.items())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", default="runs/test-timings", type=Path)
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--write-durations", type=Path, metavar="FILE")
    args = parser.parse_args(argv)
    parts = read_parts(args.folder)
    if not parts:
        print(f"no junit XML in {args.folder}: `make test` writes it there", file=sys.stderr)
        return 2
    print(render(parts, args.top))
    if args.write_durations:
        table = durations(parts)   # a file a line: a re-measure's diff shows which files changed
        args.write_durations.write_text("{\n" + ",\n".join(f"{json.dumps(file)}: {json.dumps(tests)}"
                                                          for file, tests in table.items()) + "\n}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
