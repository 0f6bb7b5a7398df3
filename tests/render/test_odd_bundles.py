"""Bundles holding one kind of evidence (only stacks, only metrics, only logs, no incident.toml)
render a readable report: the answer on the first screen, a sensible time axis, every chart drawn,
nothing fetched, no script error — checked in headless Chromium as `--screens` opens pages."""

from __future__ import annotations

import shutil
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from forensics.render import screens
from forensics.render.axis import MIN_SPAN_S
from forensics.report import render
from tests.test_report import REFERENCE

KINDS = {"journal": "decode froze at 21:34:47", "metrics": "No engine froze in the evidence",
         "stacks": "py-spy showed the decode TP group desynchronised (TP_DESYNC) at 21:40:20"}


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("odd")
    out = {}
    for kind in KINDS:
        bundle = folder / f"{kind}-only"
        shutil.copytree(REFERENCE / kind, bundle / kind)
        out[kind] = render(bundle, folder / f"out-{kind}", progress=False).out
    return out


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_one_kind_of_evidence_still_reads(reports: dict[str, Path], browser: Any, kind: str) -> None:
    opened = screens.open_offline(browser, reports[kind] / "report.html", (1280, 720))
    page = opened.page
    assert opened.errors == [] and opened.refused == []
    verdict = page.locator("p.verdict").first
    assert KINDS[kind] in verdict.inner_text()
    assert verdict.bounding_box()["y"] < 720
    assert "2026-06-18 (UTC)" in page.inner_text("body")  # dated from the evidence, no window given
    drawn = page.evaluate("[...document.querySelectorAll('.js-plotly-plot')].every(p => p.querySelector('.main-svg'))")
    assert drawn
    x_range = page.evaluate("document.querySelector(\"div.js-plotly-plot[id$='timeline']\")._fullLayout.xaxis.range")
    start, end = (datetime.fromisoformat(str(v)) for v in x_range)
    assert (end - start).total_seconds() >= MIN_SPAN_S, x_range
    page.context.close()
