"""Render report.html in headless Chromium: save a PNG, or measure its layout at a window size, to check the
self-contained page as a user sees it."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
# Without the background-networking flags Chromium keeps trying to reach the network at start-up.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars"]


class NoBrowser(RuntimeError):
    pass


def _browser() -> str:
    browser = next((b for b in map(shutil.which, BROWSERS) if b), None)
    if browser is None:
        raise NoBrowser("no Chromium found (Debian: apt-get install chromium)")
    return browser


# Runs in the page once it has loaded: what a layout check reads (window, page and verdict geometry, and the
# tables whose scroll container has to scroll them sideways), written on the top document for --dump-dom.
MEASURE = """<script>addEventListener('load', () => {
  const v = document.getElementById('verdict'), box = v ? v.getBoundingClientRect() : null;
  const scrolled = [...document.querySelectorAll('div.scroll')].filter(s => s.scrollWidth > s.clientWidth + 1);
  top.document.body.setAttribute('data-layout', JSON.stringify({
    window_width: innerWidth, window_height: innerHeight,
    page_width: document.documentElement.scrollWidth,
    verdict_top: box && box.top, verdict_bottom: box && box.bottom,
    first_section: (document.querySelector('section') || {}).id || null,
    scrolled_tables: scrolled.map(s => s.querySelector('table').className),
    tables_outside_scroll: [...document.querySelectorAll('table')].filter(
        t => !t.parentElement.classList.contains('scroll')).length}));
});</script>"""
# Headless Chromium dumps the DOM of a window at least 500 px wide, so the page is measured in a frame of
# exactly the size asked for, as a phone's viewport would hold it.
FRAME = ("<!doctype html><body style='margin:0'><iframe style='border:0;display:block;width:{width}px;"
         "height:{height}px' srcdoc=\"{page}\"></iframe></body>")


def measure_layout(page: Path, width: int, height: int, timeout: float = 60) -> dict:
    """The page's layout in a viewport of width x height CSS pixels, measured by the page itself (MEASURE)."""
    browser = _browser()
    with tempfile.TemporaryDirectory() as scratch:
        probe = Path(scratch) / "page.html"
        probe.write_text(FRAME.format(width=width, height=height,
                                      page=html.escape(page.read_text() + MEASURE, quote=True)))
        try:
            proc = subprocess.run([browser, *FLAGS, f"--user-data-dir={scratch}/profile",
                                   f"--window-size={max(width, 500) + 20},{height + 20}", "--virtual-time-budget=5000",
                                   "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise NoBrowser(f"{browser} took longer than {timeout:.0f}s") from None
    found = re.search(r"data-layout=\"([^\"]*)\"", proc.stdout)
    if not found:
        raise NoBrowser(f"{browser} dumped no measured page: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(html.unescape(found.group(1)))


def screenshot(page: Path, out: Path, width: int = 1500, height: int = 2400, timeout: float = 60) -> Path:
    browser = _browser()
    with tempfile.TemporaryDirectory() as profile:
        try:
            proc = subprocess.run([browser, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
                                   f"--screenshot={out.resolve()}", page.resolve().as_uri()],
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise NoBrowser(f"{browser} took longer than {timeout:.0f}s") from None
    if not out.is_file():
        raise NoBrowser(f"{browser} wrote no screenshot: {proc.stderr.strip().splitlines()[-1:]}")
    return out
