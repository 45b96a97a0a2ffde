"""The commands `quant sweep` prints last: each states the exit code it gives on the run, worked out from the
run's numbers. Every stated code is checked by running the command itself."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

from reports.next_steps import next_steps, write_next_steps
from tests.fixtures import variant, write_items, write_run
from tests.helpers import REPO

LINE = re.compile(r"^  (quant .*?)\s+# exit (\d): (.*)$")


def stated(lines: list[str]) -> list[tuple[str, int, str]]:
    return [(m.group(1), int(m.group(2)), m.group(3)) for m in map(LINE.match, lines[1:])]


def run_with_items(tmp_path, scores: dict[str, list[int]], tok_s: dict[str, float], sizes: dict[str, int]):
    run = write_run(tmp_path / "run", {name: {**variant({"math": sum(s) / len(s)}, tok_s=tok_s[name]),
                                              "size_bytes": sizes[name]} for name, s in scores.items()})
    for name, s in scores.items():
        write_items(run, name, "math", s)
    return run


def test_the_blocked_variant_the_passing_one_and_the_picks(tmp_path, monkeypatch):
    """Order matters not: the blocked variant is found by its numbers (30 of 200 items lost), the pick by
    throughput is the fastest within the drop, the pick by memory the smallest."""
    base = [1] * 200
    run = run_with_items(tmp_path, {"bf16": base, "small-ok": base[:199] + [0], "lossy": [0] * 30 + [1] * 170,
                                    "fast-ok": base},
                         tok_s={"bf16": 100, "small-ok": 90, "lossy": 500, "fast-ok": 150},
                         sizes={"bf16": 8, "small-ok": 2, "lossy": 1, "fast-ok": 4})
    monkeypatch.chdir(tmp_path)
    write_next_steps(run)
    lines = next_steps("run", run)
    said = {command: (code, comment) for command, code, comment in stated(lines)}
    assert said["quant gate --baseline run --candidate run:lossy"][0] == 1
    assert said["quant gate --baseline run --candidate run:small-ok"] == (0, "pass")
    assert "quant diff --baseline run --candidate run:lossy" in said
    assert said["quant choose run"] == (0, "fast-ok for every task")
    assert said["quant choose run --objective memory"] == (0, "small-ok for every task")
    for command, code, _ in stated(lines):
        proc = subprocess.run([sys.executable, "-m", "quant.cli", *shlex.split(command)[1:]], cwd=tmp_path,
                              capture_output=True, text=True, env={"PYTHONPATH": str(REPO), "PATH": ""})
        assert proc.returncode == code, (command, proc.stdout, proc.stderr)


def test_nothing_blocked_no_diff_and_the_gate_shown_passes(tmp_path, monkeypatch):
    base = [1] * 200
    run = run_with_items(tmp_path, {"bf16": base, "q": base}, tok_s={"bf16": 100, "q": 90}, sizes={"bf16": 8, "q": 2})
    write_next_steps(run)
    commands = [c for c, _, _ in stated(next_steps("runs/x", run))]
    assert commands[0] == "quant gate --baseline runs/x --candidate runs/x:q"   # the run as the user names it
    assert not any(c.startswith("quant diff") for c in commands)


def test_a_run_of_the_baseline_alone_has_no_next_steps(tmp_path):
    run = write_run(tmp_path / "run", {"bf16": variant({"math": 0.9})})
    write_next_steps(run)
    assert next_steps("run", run) == [] and next_steps("x", tmp_path / "nosuchrun") == []
