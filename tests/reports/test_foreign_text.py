"""Every output escapes what it did not write: a server's or a model's text in pareto.md's cells and lists, in
JUnit attributes, and on the terminal (`quant diff`)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from core.results import Results
from core.run_layout import RunLayout
from reports.markdown import render_markdown
from tests.fixtures import results, variant, write_run
from tests.helpers import quant

HOSTILE = "boom\n## heading | <img src=x onerror=alert(1)> \x1b]52;c;aGk=\x07"


def test_a_reason_with_newlines_markup_and_escapes_stays_in_its_place_in_pareto_md(tmp_path):
    document = results({"bf16": variant({"math": 0.5}), "w4": variant({"math": 0.5}, status="failed")})
    document["variants"]["w4"]["reason"] = HOSTILE
    text = render_markdown(Results.of(document), tmp_path)
    assert not any(line.startswith("## heading") for line in text.splitlines())
    assert "<img" not in text and "&lt;img" in text and "\x1b" not in text and "\x07" not in text
    assert "boom ## heading \\| &lt;img" in text


def test_junit_attributes_are_quoted_whatever_the_task_is_called(tmp_path):
    task = 'x" injected="1'
    run = write_run(tmp_path / "run", {"bf16": variant({task: 0.9}), "w4": variant({task: 0.5})},
                    gates={"max_drop": 0.05})
    code, out = quant("gate", "--baseline", str(run), "--candidate", f"{run}:w4", "--junit", str(tmp_path / "j.xml"))
    assert code in (1, 3), out
    case = ET.parse(tmp_path / "j.xml").getroot().find(".//testcase")
    assert "injected" not in case.attrib and case.attrib["name"].startswith(task)


def test_diff_prints_no_escape_sequence_a_model_wrote(tmp_path):
    run = write_run(tmp_path / "run", {"bf16": variant({"math": 1.0}), "w4": variant({"math": 0.0})})
    for name, answer in (("bf16", "7"), ("w4", "8\x1b]52;c;aGk=\x07\x1b[2J")):
        path = RunLayout(run).variant(name).items("math")
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"doc_id": 0, "prompt": "Q", "target": "7", "resps": [[answer]],
                                    "filtered_resps": {"strict-match": [answer]},
                                    "metrics": {"exact_match,strict-match": float(answer == "7")}}) + "\n")
    code, out = quant("diff", "--baseline", str(run), "--candidate", f"{run}:w4")
    assert code == 0, out
    assert "LOST item 0" in out and "\x1b" not in out and "\x07" not in out
