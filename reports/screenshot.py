"""Render report.html in headless Chromium and save a PNG, to check the self-contained page as a user sees it."""

from __future__ import annotations

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


def screenshot(page: Path, out: Path, width: int = 1500, height: int = 2400, timeout: float = 60) -> Path:
    browser = next((b for b in map(shutil.which, BROWSERS) if b), None)
    if browser is None:
        raise NoBrowser("no Chromium found (Debian: apt-get install chromium)")
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
