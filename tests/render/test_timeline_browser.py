"""The shared timeline read as an on-call engineer reads it, in headless Chromium (Debian's, the
network refused) at 1280×720 and 1600×1000: no label hides another, both last-batch markers show
with their times, every swimlane cell's hover carries the full time and its lane, and no escaped
entity or stray backtick shows as text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from forensics.render import screens

SIZES = [(1280, 720), (1600, 1000)]


@pytest.fixture(scope="module")
def pages(reference_report: Path) -> dict[str, Path]:
    """The reference incident's report.html and timeline.html, rendered as `forensics report` does
    (the session's one rendering, only read here)."""
    return {name: reference_report / name for name in ("timeline.html", "report.html")}


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


MARKER_PIXELS = """(name) => { const gd = document.getElementById('timeline');
    const t = gd._fullData.find(d => d.name === name); const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
    const box = gd.getBoundingClientRect();
    return Array.from(t.x, (x, k) => [box.left + xa._offset + xa.d2p(x), box.top + ya._offset + ya.d2p(t.y[k])]); }"""


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_last_batch_marker_is_on_top_and_its_hover_is_its_own(pages: dict[str, Path], browser: Any,
                                                                  size: tuple[int, int]) -> None:
    """Under the mouse at each last-batch marker, the hover is the freeze's own sentence, not the
    KV-transfer errors logged in the same seconds (the reference README: decode's last batch
    21:34:47, prefill's 21:39:07)."""
    page = _open(browser, pages["timeline.html"], size)
    assert len(page.evaluate(MARKER_PIXELS, "last batch before a freeze")) == 2
    said = []
    for k in range(2):
        page.evaluate("(y) => window.scrollBy(0, y - window.innerHeight / 2)",
                      page.evaluate(MARKER_PIXELS, "last batch before a freeze")[k][1])
        x, y = page.evaluate(MARKER_PIXELS, "last batch before a freeze")[k]  # in the viewport now
        page.mouse.move(x, y)
        page.wait_for_timeout(200)
        said.append(page.evaluate("() => [...document.querySelectorAll('#timeline .hoverlayer .hovertext')].map(h => h.textContent)"))
        page.mouse.move(5, 5)
        page.wait_for_timeout(100)
    # one hover label under the mouse, and it is the freeze's
    assert [len(labels) for labels in said] == [1, 1], said
    assert said[0][0].startswith("decode froze at 21:34:47"), said
    assert said[1][0].startswith("prefill froze at 21:39:07"), said
    page.context.close()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_status_strip_labels_its_key_times_apart(pages: dict[str, Path], browser: Any,
                                                     size: tuple[int, int]) -> None:
    """The report's first-screen strip names each dashed line (the reference README's key times),
    and no label covers another or the legend."""
    page = _open(browser, pages["report.html"], size)
    boxes = page.evaluate("""() => [...document.querySelectorAll("div.js-plotly-plot[id$='overview'] g.annotation")]
        .map(g => { const r = g.querySelector('rect.bg').getBoundingClientRect();
                    return [g.textContent, r.left, r.top, r.right, r.bottom]; })""")
    assert sorted(b[0] for b in boxes) == ["detected 21:38:30", "mitigated 21:40:45", "resolved 21:42:00",
                                           "started 21:34:47"]
    legend = page.evaluate("""() => { const r = document.querySelector("div.js-plotly-plot[id$='overview'] g.legend")
        .getBoundingClientRect(); return ['legend', r.left, r.top, r.right, r.bottom]; }""")
    for n, a in enumerate(boxes):
        assert _apart(a, legend), (a, legend)
        for b in boxes[n + 1:]:
            assert _apart(a, b), (a, b, size)
    page.context.close()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_health_checks_are_drawn_and_say_so_under_the_mouse(pages: dict[str, Path], browser: Any,
                                                           size: tuple[int, int]) -> None:
    """Every per-minute health marker is drawn inside the swimlanes, and the one under the mouse
    in the frozen minutes says how many checks decode answered OK (the blind spot, seen)."""
    page = _open(browser, pages["timeline.html"], size)
    name = "health checks answered OK (per minute)"
    drawn = page.evaluate("""(name) => { const gd = document.getElementById('timeline');
        const full = gd._fullData.find(d => d.name === name);
        const trace = gd.querySelector('.scatterlayer .trace' + full.uid);
        return [full.x.length, trace.querySelectorAll('path.point').length]; }""", name)
    assert drawn[0] == drawn[1] > 0
    points = page.evaluate(MARKER_PIXELS, name)
    texts = page.evaluate("(name) => document.getElementById('timeline')._fullData.find(d => d.name === name).text", name)
    k = next(n for n, t in enumerate(texts) if "decode" in t and "from 21:36" in t)
    page.evaluate("(y) => window.scrollBy(0, y - window.innerHeight / 2)", points[k][1])
    x, y = page.evaluate(MARKER_PIXELS, name)[k]
    page.mouse.move(x, y)
    page.wait_for_timeout(200)
    said = page.evaluate("() => [...document.querySelectorAll('#timeline .hoverlayer .hovertext')].map(h => h.textContent)")
    assert len(said) == 1 and "decode · health checks" in said[0] and "answered OK in the minute from 21:36" in said[0]
    page.context.close()
