"""PNG pictures of a rendered report, for a reviewer who will not open a browser
(`forensics report BUNDLE --screens`).

Debian's Chromium, headless, driven by Playwright from PyPI: nothing is downloaded, and every
request that is not a local file is refused, so taking the pictures loads nothing from the network
either. The browser tests open pages with the same functions (`chromium`, `open_offline`), so
what the tests measure is what the pictures show.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forensics.errors import ForensicsError

CHROMIUM = Path(os.environ.get("FORENSICS_CHROMIUM", "/usr/bin/chromium"))
SIZES = ((1280, 720), (1600, 1000))  # a laptop, a desktop window
LOCAL = ("file:", "data:", "blob:")
SCREENS_DIR = "screens"
# every plotly figure on the page has drawn its SVG
CHARTS_DRAWN = "[...document.querySelectorAll('.js-plotly-plot')].every(p => p.querySelector('.main-svg'))"


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium (Debian's `chromium` package, or `FORENSICS_CHROMIUM`)."""
    if not CHROMIUM.exists():
        raise ForensicsError(f"pictures need Chromium at {CHROMIUM}: sudo apt-get install chromium "
                             "(or set FORENSICS_CHROMIUM to a Chromium binary)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise ForensicsError("pictures need the playwright package: pip install playwright "
                             "(its browser download is not needed; Debian's Chromium is used)") from None
    with sync_playwright() as driver:
        # root (CI, containers) cannot use Chromium's sandbox
        browser = driver.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class OpenPage:
    """A page opened offline, with what it complained about and what it tried to fetch."""

    page: Any
    errors: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


def open_offline(browser: Any, page_path: Path, size: tuple[int, int] = (1400, 900)) -> OpenPage:
    """`page_path` in a `size` viewport with every non-local request refused, once its charts are drawn."""
    context = browser.new_context(viewport={"width": size[0], "height": size[1]})
    opened = OpenPage(None)

    def route(request: Any) -> None:
        if request.request.url.startswith(LOCAL):
            request.continue_()
        else:
            opened.refused.append(request.request.url)
            request.abort()

    context.route("**/*", route)
    page = context.new_page()
    page.on("console", lambda m: opened.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: opened.errors.append(str(e)))
    page.goto(Path(page_path).resolve().as_uri())
    page.wait_for_load_state("load")
    page.wait_for_function(CHARTS_DRAWN)
    page.wait_for_timeout(300)  # plotly lays labels out after the first draw
    opened.page = page
    return opened


def take(report_html: Path, out: Path | None = None) -> list[Path]:
    """The first screen of `report_html` at each of `SIZES`, and its timeline figure whole, as PNGs
    in `out` (default: `screens/` beside the report).

    Taken in a process of its own: Playwright's synchronous driver refuses to run where an asyncio
    loop runs (a Jupyter kernel, papermill's caller) or where another driver is open."""
    folder = out or report_html.parent / SCREENS_DIR
    done = subprocess.run([sys.executable, "-m", "forensics.render.screens", str(report_html), str(folder)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise ForensicsError(f"pictures of {report_html} failed: {said}")
    return [Path(line) for line in done.stdout.splitlines() if line]


def _take(report_html: Path, folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    with chromium() as browser:
        for width, height in SIZES:
            opened = open_offline(browser, report_html, (width, height))
            first = folder / f"first-screen-{width}x{height}.png"
            opened.page.screenshot(path=str(first))
            written.append(first)
            figure = opened.page.locator("div.js-plotly-plot[id$='timeline']").first
            if figure.count():
                shot = folder / f"timeline-{width}x{height}.png"
                figure.screenshot(path=str(shot))
                written.append(shot)
            opened.page.context.close()
    return written


if __name__ == "__main__":
    try:
        for path in _take(Path(sys.argv[1]), Path(sys.argv[2])):
            print(path)
    except ForensicsError as error:
        print(error, file=sys.stderr)
        sys.exit(1)
