"""Headless Chromium for the report tests: load a page offline, read back what its script wrote into the DOM.

The page records its own outcome in `#render-status` (charts expected / drawn, errors caught) once every
`Plotly.newPlot` promise has resolved; `--dump-dom` after a virtual-time budget returns that DOM. Console
output goes to stderr with `--enable-logging=stderr`; the page logs nothing, so any console line is a fault.
All host names resolve to nothing, so a page that tried to fetch anything would log a failed load.
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND",
)


def chromium_or_skip() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    pytest.skip("Chromium not found on PATH: the report-page browser tests need it (README, Set-up)")


@dataclass(frozen=True)
class Rendered:
    status: dict[str, str]
    console: list[str]
    banner: str

    @property
    def expected(self) -> int:
        return int(self.status.get("data-expected", "-1"))

    @property
    def drawn(self) -> int:
        return int(self.status.get("data-drawn", "-1"))


def render(page: Path, work: Path, *, timeout_s: float = 60.0) -> Rendered:
    exe = chromium_or_skip()
    cmd = [
        exe,
        *FLAGS,
        f"--user-data-dir={work / 'chromium-profile'}",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=2000",
        "--dump-dom",
        page.resolve().as_uri(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    dom = proc.stdout
    tag = re.search(r'<div id="render-status"([^>]*)>', dom)
    status = dict(re.findall(r'([\w-]+)="([^"]*)"', tag.group(1))) if tag else {}
    banner_m = re.search(r'<p id="report-errors"[^>]*>(.*?)</p>', dom, re.S)
    banner = html.unescape(banner_m.group(1)) if banner_m else ""
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    return Rendered(status=status, console=console, banner=banner)


def screenshot(page: Path, png: Path, work: Path, *, width: int = 1400, height: int = 3000) -> None:
    exe = chromium_or_skip()
    cmd = [
        exe,
        *FLAGS,
        f"--user-data-dir={work / 'chromium-profile'}",
        "--hide-scrollbars",
        f"--window-size={width},{height}",
        "--virtual-time-budget=2000",
        f"--screenshot={png}",
        page.resolve().as_uri(),
    ]
    subprocess.run(cmd, capture_output=True, timeout=60)
