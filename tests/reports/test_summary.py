"""The verdict a report opens with: each variant's gate outcome under the run's policy and the check that decided
it, and per task the variant `quant choose` picks with its serve command; and report.html's structure."""

from __future__ import annotations

from html.parser import HTMLParser

from core.results import Results
from reports.html import render_html
from reports.markdown import render_markdown
from reports.summary import summarize
from tests.fixtures import results, variant, write_items, write_run


def _run(tmp_path, gates=None):
    """bf16 baseline; `same` loses nothing, `worse` loses 24 of 200 items, `slightly` loses 5 (not significant),
    `unserved` the engine could not serve."""
    run = write_run(tmp_path / "run", {"bf16": variant({"math": 0.9}), "same": variant({"math": 0.9}, tok_s=300),
                                       "worse": variant({"math": 0.78}, tok_s=400),
                                       "slightly": variant({"math": 0.875}, tok_s=350),
                                       "unserved": variant({"math": 0.5}, status="unsupported")}, gates=gates)
    write_items(run, "bf16", "math", [1.0] * 180 + [0.0] * 20)
    write_items(run, "same", "math", [1.0] * 180 + [0.0] * 20)
    write_items(run, "worse", "math", [0.0] * 24 + [1.0] * 156 + [0.0] * 20)
    write_items(run, "slightly", "math", [0.0] * 5 + [1.0] * 175 + [0.0] * 20)
    write_items(run, "unserved", "math", [0.0] * 100 + [1.0] * 100)
    return run, Results.model_validate_json((run / "results.json").read_text())


def test_each_variant_gets_the_gates_outcome_and_the_deciding_check(tmp_path):
    run, document = _run(tmp_path, gates={"rule": "significant", "max_drop": 0.02})
    summary = summarize(document, run)
    gates = {g.variant: g for g in summary.gates}
    assert summary.policy.startswith("rule significant, baseline recipe")
    assert gates["bf16"].outcome == "baseline" and gates["same"].outcome == "pass"
    assert gates["worse"].outcome == "regression" and gates["worse"].deciding.startswith("math exact_match: drop 0.120")
    assert gates["slightly"].outcome == "inconclusive" and "not significant" in gates["slightly"].deciding
    assert gates["unserved"].outcome == "cannot be deployed" and "engine: no kernel" in gates["unserved"].deciding


def test_the_pick_per_task_is_chooses_with_its_serve_command(tmp_path):
    run, document = _run(tmp_path)   # the default policy here: math may drop 0.02
    [pick] = summarize(document, run).picks
    assert (pick.task, pick.variant) == ("math", "same")   # `worse` is faster but drops 0.12
    assert "--served-model-name same" in pick.command and "--max-model-len 512" in pick.command


def test_a_run_the_gate_cannot_read_says_so_per_variant(tmp_path):
    run, document = _run(tmp_path, gates={"per_task": {"maths": 0.1}})
    lines = {g.variant: g for g in summarize(document, run).gates}
    assert lines["same"].outcome == "cannot gate" and "did you mean 'math'" in lines["same"].deciding


def test_pareto_md_opens_with_the_verdict(tmp_path):
    run, document = _run(tmp_path)
    text = render_markdown(document, run)
    sections = [line for line in text.splitlines() if line.startswith("## ")]
    assert sections[:2] == ["## Verdict", "## math (exact_match)"]
    verdict = text.split("## Verdict")[1].split("## math")[0]
    assert "| worse | ❌ regression | math exact_match: drop 0.120 > margin 0.020 |" in verdict
    assert "| math | same |" in verdict and "--served-model-name same" in verdict


class Dom(HTMLParser):
    """Just enough of a DOM: every element with its parent chain, attributes and text."""
    VOID = {"meta", "img", "br", "hr", "link", "input"}

    def __init__(self):
        super().__init__()
        self.stack, self.elements = [], []

    def handle_starttag(self, tag, attrs):
        element = {"tag": tag, "attrs": dict(attrs), "parents": [p["tag"] + "." + p["attrs"].get("class", "")
                                                                   for p in self.stack], "text": ""}
        self.elements.append(element)
        if tag not in self.VOID:
            self.stack.append(element)

    def handle_endtag(self, tag):
        while self.stack and self.stack.pop()["tag"] != tag:
            pass

    def handle_data(self, data):
        for element in self.stack:
            element["text"] += data


def test_report_html_structure(tmp_path):
    run, document = _run(tmp_path)
    dom = Dom()
    dom.feed(render_html(document, None, run))
    sections = [el for el in dom.elements if el["tag"] == "section"]
    assert sections[0]["attrs"]["id"] == "verdict"
    first_heading = next(el for el in dom.elements if el["tag"] == "h2")
    assert first_heading["text"] == "Verdict"   # nothing else comes between the title and the verdict
    tables = [el for el in dom.elements if el["tag"] == "table"]
    assert len(tables) >= 5 and all(el["parents"][-1] == "div.scroll" for el in tables)
    verdict = sections[0]["text"]
    assert "regression" in verdict and "cannot be deployed" in verdict and "--served-model-name same" in verdict
    assert any(el["attrs"].get("name") == "viewport" for el in dom.elements if el["tag"] == "meta")
    # at most 12 columns a table, and no cell that refuses to wrap
    page = render_html(document, None, run)
    assert all(table.split("</tr>")[0].count("<th") <= 12 for table in page.split("<table")[1:])
    assert "nowrap" not in page


def test_a_run_without_its_baseline_still_renders(tmp_path):
    document = Results.model_validate(results({"q": variant({"math": 0.8})}, baseline="bf16"))
    assert "## Verdict" in render_markdown(document, None)
