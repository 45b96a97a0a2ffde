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


FORGED = "math\x1b]52;c;aGk=\x07\x1b[2J<img src=x onerror=alert(1)>|\u202eevil\u2066\n## ✅ PASS (forged)"
RAW = ("\x1b", "\x07", "\u202e", "\u2066")


def test_a_task_name_from_elsewhere_reaches_no_sink_raw(tmp_path):
    """results.json from elsewhere: its task name is cleaned on the terminal (gate, choose, report and its
    library warnings), in gate.md and pareto.md (one line, `|` and tags escaped, no forged heading), JUnit and
    report.html."""
    run = write_run(tmp_path / "run", {"bf16": variant({FORGED: 0.9}), "w4": variant({FORGED: 0.5})},
                    gates={"max_drop": 0.05})
    gate_md, junit = tmp_path / "gate.md", tmp_path / "junit.xml"
    outputs = [quant("gate", "--baseline", str(run), "--candidate", f"{run}:w4", "--markdown", str(gate_md),
                     "--junit", str(junit)),
               quant("choose", str(run)), quant("report", str(run))]
    for code, out in outputs:
        assert code in (0, 1, 3), out
        assert not [c for c in RAW if c in out], out
    for document in (gate_md.read_text(), (run / "pareto.md").read_text()):
        assert "<img" not in document and not [c for c in RAW if c in document]
        assert not [line for line in document.splitlines() if line.startswith("## ✅")]
    assert "&lt;img src=x onerror=alert(1)>\\|" in gate_md.read_text()
    assert not [c for c in RAW if c in junit.read_text()]
    page = (run / "report.html").read_text()
    assert "<img src=x" not in page and not [c for c in RAW if c in page]


def test_names_and_reasons_from_elsewhere_print_on_one_clean_line():
    from reports.sweep_output import sweep_summary

    document = results({"bf16": variant({"math": 0.5}), "w4": variant({"math": 0.5}, status="failed")})
    document["variants"]["w4"]["reason"] = "the endpoint stopped serving: it lists \x1b[2Jm\u202e\n## forged"
    lines, failed = sweep_summary(document, None, False)
    assert failed and lines[1] == "  FAILED w4: the endpoint stopped serving: it lists [2Jm ## forged"


def test_rich_markup_in_a_servers_error_is_shown_not_interpreted(capsys):
    from types import SimpleNamespace

    from quant.perf_stage import PerfStage
    from quant.progress import Reporter

    stage = PerfStage.__new__(PerfStage)
    stage.ctx = SimpleNamespace(reporter=Reporter(live=False))
    point = {"errors": 2, "n": 2, "concurrency": 1,
             "first_error": "HTTP 500: [link=https://attacker.example]click[/link] [bold red]PASS[/]"}
    stage._log("w", {"points": [point]})
    err = capsys.readouterr().err
    assert "[link=https://attacker.example]click[/link] [bold red]PASS[/]" in " ".join(err.split())
    assert "\x1b]8" not in err


def test_a_model_id_a_server_lists_is_named_on_one_clean_line_when_it_stops_serving(monkeypatch):
    from perf.engines.endpoint import EndpointServer
    from tests import hostile_server

    monkeypatch.setattr(hostile_server, "MODEL", "other\x1b]52;c;aGk=\x07\u202e\n## forged")
    server = hostile_server.Server()
    try:
        why = EndpointServer(server.url, "gone\x1b[2J").death()
    finally:
        server.stop()
    assert why.endswith("it no longer lists model 'gone\\x1b[2J' (it lists other]52;c;aGk= ## forged)"), why
