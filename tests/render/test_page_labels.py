"""Issue 53, the page as an SRE reads it (1): no false label on the timeline. A bundle built as the
SRE built it from ../shared/corpus2's Ascend log (sgl-project/sglang#30453: TP0's last `Decode
batch` 07:11:02, TP1 dies of an AI Core timeout at 07:20:43, no collective timeout anywhere) and a
kernel log holding a non-fatal Xid (the kernel layer's own cited sample line), rendered by
`forensics report` and opened in Debian's headless Chromium at 1400×900:

- the freeze's label names its lane, never "None last batch 07:11:02", and lies whole in the plot;
- the note beside the first screen counts the progress lines the timeline draws, as it draws them;
- the legend names only kinds that are drawn (no "failure: collective timeout") and does not lie
  over the swimlanes' title or the plot;
- the non-fatal Xid has its own marker and is said apart on the first screen, never as the incident.

The helpers here (`corpus_bundle`, `rendered`, `open_page`, …) serve the other test_page_* files.
Skipped when the corpora are not beside the checkout (`FORENSICS_CORPUS2`/`3` point elsewhere)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from forensics.profiles import layers
from forensics.render import screens

SHARED = Path(__file__).resolve().parents[3] / "shared"
CORPUS2 = Path(os.environ.get("FORENSICS_CORPUS2", SHARED / "corpus2"))
CORPUS3 = Path(os.environ.get("FORENSICS_CORPUS3", SHARED / "corpus3"))
NO_CORPORA = pytest.mark.skipif(not (CORPUS2 / "README.md").is_file() or not (CORPUS3 / "README.md").is_file(),
                                reason=f"no corpora at {CORPUS2} and {CORPUS3}")
pytestmark = NO_CORPORA
SIZE = (1400, 900)  # the SRE's window
ASCEND_LOG = "sglang_issue30453_npu_tp2_aicore_timeout_sigquit_faulthandler_pyspy_native.log"


def readme_row(corpus: Path, name: str) -> str:
    """The README's row of `name`, whitespace folded: the ground truth a test asserts is first found there."""
    (row,) = [line for line in (corpus / "README.md").read_text().splitlines() if f"`{name}`" in line]
    return " ".join(row.split())


def corpus_bundle(folder: Path, files: dict[str, str], extra: dict[str, str] | None = None) -> Path:
    """A bundle as the SRE built it: each corpus file (`corpus2/logs/x.log` →) copied to its place
    (`logs/<host>/`), as it is; `extra` files written beside them."""
    folder.mkdir(parents=True)
    for source, place in files.items():
        corpus, rest = source.split("/", 1)
        target = folder / place
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy((CORPUS2 if corpus == "corpus2" else CORPUS3) / rest, target)
    for place, text in (extra or {}).items():
        (folder / place).parent.mkdir(parents=True, exist_ok=True)
        (folder / place).write_text(text)
    return folder


def rendered(bundle: Path) -> Path:
    """`forensics report BUNDLE`'s output folder."""
    from forensics.report import render

    return render(bundle, bundle.parent / f"{bundle.name}-report", progress=False).out


def open_page(browser: Any, page: Path) -> Any:
    opened = screens.open_offline(browser, page, SIZE)
    assert opened.errors == [] and opened.refused == []
    return opened.page


# the timeline figure's div, and each lane's name by its number
TIMELINE = "document.querySelector(\"div.js-plotly-plot[id$='timeline']\")"
LANES = (f"(() => {{ const ya = {TIMELINE}.layout.yaxis; "
         "return Object.fromEntries(ya.tickvals.map((v, i) => [v, ya.ticktext[i]])); })()")
# every legend entry of the swimlanes: name, how many points it draws, its symbol
LEGEND = f"""{TIMELINE}._fullData.filter(t => t.showlegend && (t.legend || 'legend') === 'legend')
    .map(t => [t.name, (t.x || []).length, t.marker ? t.marker.symbol : null])"""
BOX = "(el) => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; }"


def apart(a: list[float], b: list[float]) -> bool:
    return a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1]


# a non-fatal Xid as the kernel layer's cited sample writes it (no corpus file holds one)
NONFATAL_LINE = next(s.line for layer in layers() for s in layer.samples
                     if s.kind == "gpu_xid_nonfatal" and s.line.startswith("NVRM: Xid"))
KERNEL_LOG = f"Jul 07 07:15:00 npu-node kernel: {NONFATAL_LINE}\n"  # between the freeze and the crash


@pytest.fixture(scope="module")
def ascend(tmp_path_factory: pytest.TempPathFactory) -> Path:
    bundle = corpus_bundle(tmp_path_factory.mktemp("page-labels") / "ascend-npu",
                           {f"corpus2/logs/{ASCEND_LOG}": "logs/npu-node"}, {"journal/kern.log": KERNEL_LOG})
    return rendered(bundle)


def test_the_readme_states_what_the_page_is_checked_against() -> None:
    row = readme_row(CORPUS2, ASCEND_LOG)
    assert "TP0 last `Decode batch` 07:11:02" in row and "TP1 exception (aicore timeout) 07:20:43" in row
    assert "collective timeout" not in row.lower() and "Xid" not in row


def test_the_freeze_is_labelled_by_its_lane_never_none_and_whole_in_the_plot(ascend: Path, browser: Any) -> None:
    page = open_page(browser, ascend / "report.html")
    assert "None last batch" not in page.inner_text("body")
    labels = page.evaluate(f"""[...{TIMELINE}.querySelectorAll('g.annotation')]
        .map(g => [g.textContent, ...({BOX})(g.querySelector('rect.bg'))])
        .filter(b => b[0].includes('last batch'))""")
    every = page.evaluate(f"[...{TIMELINE}.querySelectorAll('g.annotation, .ytick')].map(g => g.textContent)")
    assert not [text for text in every if "None" in text], every
    assert [b[0].rsplit(" ", 3)[1:] for b in labels] == [["last", "batch", "07:11:02"]], labels
    assert labels[0][0].endswith("TP0 last batch 07:11:02")  # its lane: the log's file and the rank
    plot = page.evaluate(f"""(() => {{ const gd = {TIMELINE}, r = gd.getBoundingClientRect(), xa = gd._fullLayout.xaxis;
        return [r.left + xa._offset, r.left + xa._offset + xa._length]; }})()""")
    assert plot[0] <= labels[0][1] and labels[0][3] <= plot[1] + 1, (labels, plot)  # not over the lane names
    page.context.close()


def test_the_note_counts_the_progress_lines_the_timeline_draws(ascend: Path, browser: Any) -> None:
    page = open_page(browser, ascend / "report.html")
    drawn = page.evaluate(f"""{TIMELINE}._fullData.filter(t => t.type === 'heatmap')
        .reduce((n, t) => n + t.z.reduce((s, row) => s + Array.from(row).reduce((a, b) => a + b, 0), 0), 0)""")
    lanes = page.evaluate(f"""(() => {{ const t = {TIMELINE}._fullData.find(t => t.type === 'heatmap');
        return t.z.map((row, y) => Array.from(row).some(v => v > 0) ? y : null).filter(y => y !== null); }})()""")
    names = page.evaluate(LANES)
    note = page.locator("p.note", has_text="progress line").first.inner_text()
    assert drawn > 0 and note.startswith(f"{drawn} progress lines are logged"), (drawn, note)
    for y in lanes:  # each lane the strip fills is named in the note
        assert names[str(y)].split(" (")[0].split("…")[-1] in note, (names[str(y)], note)
    assert "No component logs progress lines" not in page.inner_text("body")
    page.context.close()


def test_the_legend_names_what_is_drawn_and_keeps_off_the_title_and_plot(ascend: Path, browser: Any) -> None:
    page = open_page(browser, ascend / "report.html")
    legend = page.evaluate(LEGEND)
    names = [name for name, _, _ in legend]
    assert "failure: collective timeout" not in names, names
    assert all(points > 0 for _, points, _ in legend), legend  # no entry for a kind with nothing drawn
    assert {"failure: npu device error", "failure: process group abort"} <= set(names), names
    box = page.evaluate(f"({BOX})({TIMELINE}.querySelector('g.legend'))")
    title = page.evaluate(f"{TIMELINE}.querySelector('g.legend .legendtitletext').textContent")
    assert title.startswith("swimlanes: progress lines per")
    texts = page.evaluate(f"""[...{TIMELINE}.querySelectorAll('g.annotation')].filter(g => g.textContent.trim())
        .map(g => [g.textContent, ...({BOX})(g)])""")
    for text in texts:
        assert apart(box, text[1:]), f"the legend lies over {text[0]!r}"
    plot_top = page.evaluate(f"""(() => {{ const gd = {TIMELINE};
        return gd.getBoundingClientRect().top + gd._fullLayout.yaxis._offset; }})()""")
    assert box[3] <= plot_top + 1, (box, plot_top)
    page.context.close()


def test_a_non_fatal_xid_has_its_own_marker_and_is_said_apart_not_as_the_incident(ascend: Path,
                                                                                 browser: Any) -> None:
    page = open_page(browser, ascend / "report.html")
    verdict = page.locator("p.verdict").first.inner_text()
    assert "07:11:02" in verdict and "Xid" not in verdict  # the incident is the freeze
    apart_line = page.locator("p.non-fatal")
    assert "not the incident" in apart_line.inner_text() and "Xid 63" in apart_line.inner_text()
    assert apart_line.bounding_box()["y"] < SIZE[1]  # on the first screen, beside the answer
    lanes = {v: k for k, v in page.evaluate(LANES).items()}
    track, kernel = float(lanes["track · non-fatal device errors"]), float(lanes["npu-node · kernel"])
    traces = page.evaluate(f"{TIMELINE}._fullData.filter(t => t.type === 'scatter')"
                           ".map(t => [t.name, t.y ? Array.from(t.y) : [], t.marker ? t.marker.symbol : null])")
    on = {name: symbol for name, ys, symbol in traces if track in ys or kernel in ys}
    assert set(on) == {"non-fatal device errors (reported, no fault)", "non-fatal device error (no fault)"}, on
    assert set(on.values()) == {"circle-open"}  # not a fault's symbol, not an error's cross
    # the fault's own track is drawn above it
    assert float(lanes["track · wedge"]) > track
    page.context.close()


def test_a_bundle_of_a_non_fatal_xid_alone_finds_no_incident_and_says_it_apart(tmp_path: Path) -> None:
    from forensics.render.sections import ReportSession

    bundle = tmp_path / "non-fatal-only"
    (bundle / "journal").mkdir(parents=True)
    (bundle / "journal" / "kern.log").write_text(KERNEL_LOG)
    first = str(ReportSession.open(bundle, tmp_path / "out").answer())
    assert "No incident found" in first
    assert "Reported apart, not the incident (non-fatal, no fault)" in first and "Xid 63" in first
