"""report.html as a user sees it, in headless Chromium at a laptop's 1366 px and a phone's 390 px: the page never
scrolls sideways, the verdict is the first section and sits above the fold, and at 1366 px no table needs its
scroll container. The screenshots stay as artifacts ($QUANT_TEST_ARTIFACTS, else the test's tmp_path).

Marked `browser`: it runs where Chromium is installed (Debian: apt-get install chromium), with
`pytest -m browser tests/reports/test_report_layout_browser.py`; a plain `pytest` deselects it
(tests/conftest.py). tests/reports/test_summary.py checks the same page's structure without a browser."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from reports.screenshot import measure_layout, screenshot
from tests.reports.test_summary import _run
from reports.render import render_all

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    run, document = _run(tmp_path_factory.mktemp("layout"))
    render_all(run, document.dump())
    return run / "report.html"


@pytest.mark.parametrize("width, height", [(1366, 768), (390, 844)])
def test_report_fits_the_window_with_the_verdict_above_the_fold(page, width, height, tmp_path):
    layout = measure_layout(page, width, height)
    artifacts = Path(os.environ.get("QUANT_TEST_ARTIFACTS") or tmp_path)
    artifacts.mkdir(parents=True, exist_ok=True)
    shot = screenshot(page, artifacts / f"report-{width}.png", width, height)
    assert shot.stat().st_size > 0
    assert layout["window_width"] == width
    assert layout["page_width"] <= width, layout            # the page itself never scrolls sideways
    assert layout["first_section"] == "verdict" and layout["tables_outside_scroll"] == 0, layout
    assert 0 <= layout["verdict_top"] < height, layout      # the verdict starts above the fold
    if width >= 1366:
        assert layout["scrolled_tables"] == [], layout      # every table fits a laptop window as it is


def test_chromium_is_there_to_run_these():
    assert any(map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), \
        "the browser layout tests need Chromium (Debian: apt-get install chromium)"
