"""The shared timeline read as an on-call engineer reads it, in headless Chromium (Debian's, the
network refused) at 1280×720 and 1600×1000: no label hides another, both last-batch markers show
with their times, every swimlane cell's hover carries the full time and its lane, and no escaped
entity or stray backtick shows as text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from forensics.render import screens
from forensics.report import render
from tests.test_report import REFERENCE

SIZES = [(1280, 720), (1600, 1000)]


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The reference incident's report.html and timeline.html, rendered as `forensics report` does."""
    out = render(REFERENCE, tmp_path_factory.mktemp("timeline") / "out", progress=False).out
    return {name: out / name for name in ("timeline.html", "report.html")}


def _open(browser: Any, page_path: Path, size: tuple[int, int]) -> Any:
    return screens.open_offline(browser, page_path, size).page


TIMELINE = "document.querySelector(\"div.js-plotly-plot[id$='timeline']\")"
LABEL_BOXES = """(pattern) => [...document.querySelectorAll("div.js-plotly-plot[id$='timeline'] g.annotation")]
    .map(g => { const r = g.querySelector('rect.bg').getBoundingClientRect();
                return [g.textContent, r.left, r.top, r.right, r.bottom]; })
    .filter(b => new RegExp(pattern).test(b[0]))"""


def _apart(a: list[Any], b: list[Any]) -> bool:
    return a[3] <= b[1] or b[3] <= a[1] or a[4] <= b[2] or b[4] <= a[2]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("page_name", ["timeline.html", "report.html"])
def test_key_time_and_annotation_labels_never_overlap(pages: dict[str, Path], browser: Any, size: tuple[int, int],
                                                      page_name: str) -> None:
    page = _open(browser, pages[page_name], size)
    boxes = page.evaluate(LABEL_BOXES, "^(started|detected|mitigated|resolved) |^✎| last batch ")
    assert len(boxes) == 9  # four key times, three annotations, two last batches
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert _apart(a, b), f"{a[0]!r} overlaps {b[0]!r} at {size} in {page_name}"
    # each label is whole on the page, not cut at its start
    assert all(b[1] >= 0 and b[3] <= size[0] + 1 for b in boxes), boxes
    page.context.close()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("page_name", ["timeline.html", "report.html"])
def test_both_last_batches_show_with_their_times(pages: dict[str, Path], browser: Any, size: tuple[int, int],
                                                 page_name: str) -> None:
    page = _open(browser, pages[page_name], size)
    labels = page.evaluate(LABEL_BOXES, " last batch ")
    assert sorted(b[0] for b in labels) == ["decode last batch 21:34:47", "prefill last batch 21:39:07"]
    # no marker of the swimlanes (errors, py-spy rounds, lifecycle) lies under a label
    points = page.evaluate(f"""() => [...{TIMELINE}.querySelectorAll('.scatterlayer .trace path.point')]
        .map(p => {{ const r = p.getBoundingClientRect(); return ['point', r.left, r.top, r.right, r.bottom]; }})
        .filter(b => b[3] > b[1])""")
    assert points
    for label in labels:
        hidden = [p for p in points if not _apart(label, p)]
        assert not hidden, f"{label[0]!r} covers {len(hidden)} markers at {size} in {page_name}"
    visible = page.inner_text("body")
    for literal in ("&quot;", "&lt;", "&gt;", "&amp;"):
        assert literal not in visible
    page.context.close()


def test_every_lane_cell_hover_has_the_full_time_and_the_lane(pages: dict[str, Path], browser: Any) -> None:
    page = _open(browser, pages["timeline.html"], SIZES[0])
    heat = page.evaluate("""() => { const t = document.getElementById('timeline').data.find(d => d.type === 'heatmap');
        return [t.xhoverformat, t.hovertemplate, t.text ? t.text.length : 0, t.showscale]; }""")
    assert heat[0] == "%Y-%m-%d %H:%M:%S" and heat[1].startswith("%{text}<br>%{x}") and heat[2] > 0 and heat[3]
    lanes = page.evaluate("document.getElementById('timeline').layout.yaxis.ticktext")
    assert "host-1 · decode · TP1 (logs no batches)" in lanes  # not drawn as frozen for lacking batch lines
    page.context.close()
