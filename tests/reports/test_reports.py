"""Reports re-rendered from stored results: paired columns, aligned HTML tables, both plots."""

import re

from reports.render import render_all
from tests.fixtures import variant, write_items, write_run


def test_render_all_with_paired_columns(tmp_path):
    run = write_run(tmp_path / "run", {"bf16": variant({"math": 0.9}), "q": variant({"math": 0.78}, tok_s=150),
                                       "unserved": variant({"math": 0.5}, status="unsupported")})
    write_items(run, "bf16", "math", [1.0] * 180 + [0.0] * 20)
    write_items(run, "q", "math", [0.0] * 24 + [1.0] * 156 + [0.0] * 20)
    md, png, page, *_ = render_all(run, __import__("json").loads((run / "results.json").read_text()))
    text = md.read_text()
    tables = [[line for line in part.splitlines() if line.startswith("|")] for part in text.split("\n\n")]
    widths = [{line.count("|") - line.count("\\|") for line in rows} for rows in tables]
    assert all(len(w) <= 1 for w in widths), widths   # each table's rows as wide
    assert "## Checkpoints" in text and "| bf16 | " in text.split("## Checkpoints")[1]
    assert "−24/+0" in text and "p=1.2e-07" in text
    assert png.stat().st_size > 10_000
    html = page.read_text()
    for table in re.findall(r"<table.*?</table>", html, re.S):
        rows = re.findall(r"<tr.*?</tr>", table, re.S)
        assert len({r.count("<th") + r.count("<td") for r in rows}) == 1   # every row as wide as the header
    assert "Variants not fully measured" in html and "data:image/png;base64," in html
