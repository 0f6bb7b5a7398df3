"""The shared timeline read as an on-call engineer reads it, in headless Chromium (Debian's, the
network refused) at 1280×720 and 1600×1000: no label hides another, both last-batch markers show
with their times, every swimlane cell's hover carries the full time and its lane, and no escaped
entity or stray backtick shows as text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from forensics.render.sections import ReportSession
from tests.test_report import REFERENCE

SIZES = [(1280, 720), (1600, 1000)]


@pytest.fixture(scope="module")
def timeline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    session = ReportSession.open(REFERENCE, tmp_path_factory.mktemp("timeline"))
    session.write_outputs()
    return session.out_dir / "timeline.html"




def _open(browser: Any, page_path: Path, size: tuple[int, int]) -> Any:
    context = browser.new_context(viewport={"width": size[0], "height": size[1]})
    context.route("**/*", lambda r: r.continue_() if r.request.url.startswith(("file:", "data:", "blob:"))
                  else r.abort())
    page = context.new_page()
    page.goto(page_path.as_uri())
    page.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg').length > 0")
    page.wait_for_timeout(300)
    return page


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_key_time_and_annotation_labels_never_overlap(timeline: Path, browser: Any, size: tuple[int, int]) -> None:
    page = _open(browser, timeline, size)
    boxes = page.evaluate("""() => [...document.querySelectorAll('#timeline g.annotation')]
        .map(g => { const r = g.getBoundingClientRect(); return [g.textContent, r.left, r.top, r.right, r.bottom]; })
        .filter(b => /^(started|detected|mitigated|resolved) |^✎/.test(b[0]))""")
    assert len(boxes) == 7  # four key times, three annotations
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            apart = a[3] <= b[1] or b[3] <= a[1] or a[4] <= b[2] or b[4] <= a[2]
            assert apart, f"{a[0]!r} overlaps {b[0]!r} at {size}"
    # each label is whole on the page, not cut at its start
    assert all(b[1] >= 0 and b[3] <= size[0] + 1 for b in boxes), boxes
    page.context.close()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_both_last_batches_show_with_their_times(timeline: Path, browser: Any, size: tuple[int, int]) -> None:
    page = _open(browser, timeline, size)
    texts = page.evaluate("[...document.querySelectorAll('#timeline .textpoint')].map(t => t.textContent)")
    assert "decode last batch 21:34:47" in texts and "prefill last batch 21:39:07" in texts
    visible = page.inner_text("body")
    for literal in ("&quot;", "&lt;", "&gt;", "&amp;"):
        assert literal not in visible
    page.context.close()


def test_every_lane_cell_hover_has_the_full_time_and_the_lane(timeline: Path, browser: Any) -> None:
    page = _open(browser, timeline, SIZES[0])
    heat = page.evaluate("""() => { const t = document.getElementById('timeline').data.find(d => d.type === 'heatmap');
        return [t.xhoverformat, t.hovertemplate, t.text ? t.text.length : 0, t.showscale]; }""")
    assert heat[0] == "%Y-%m-%d %H:%M:%S" and heat[1].startswith("%{text}<br>%{x}") and heat[2] > 0 and heat[3]
    lanes = page.evaluate("document.getElementById('timeline').layout.yaxis.ticktext")
    assert "host-1 · decode · TP1 (logs no batches)" in lanes  # not drawn as frozen for lacking batch lines
    page.context.close()
