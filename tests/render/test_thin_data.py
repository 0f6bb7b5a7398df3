"""Thin data drawn honestly: a bundle of one real `/metrics` paste (the corpus' SGLang docs scrape,
one sample per series, no logs, no stacks). Each gauge is a marker with its value (a line of one
point draws nothing), axes of quantities that are never negative start at 0, a panel or chart with
nothing to show says so instead of drawing an empty range, series carry the file's name when the
scrape names no instance, and the no-incident first screen lists what was checked. In Chromium at
both report sizes the values and the sentences are on screen."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.test_corpus import CORPUS

SCRAPE = CORPUS / "prometheus" / "metrics_sglang_production_metrics_doc_llama3.1-8b.prom"
pytestmark = pytest.mark.skipif(not SCRAPE.is_file(), reason=f"no corpus at {CORPUS}")
SIZES = [(1280, 720), (1600, 1000)]
# the profile's panel gauges, each one sample in the paste
GAUGES = ("sglang:gen_throughput", "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage")


def _value(name: str) -> float:
    """The sample's value as the paste prints it (the ground truth, read without the suite)."""
    (line,) = [line for line in SCRAPE.read_text().splitlines() if line.startswith(name + "{")]
    return float(line.rsplit(" ", 1)[1])


@pytest.fixture(scope="module")
def thin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    bundle = tmp_path_factory.mktemp("thin") / "one-scrape"
    (bundle / "metrics").mkdir(parents=True)
    shutil.copy(SCRAPE, bundle / "metrics")
    return bundle


def test_one_scrape_draws_markers_with_values_axes_from_zero_and_says_what_is_missing(thin: Path,
                                                                                      tmp_path: Path) -> None:
    from forensics.render import figures
    from forensics.render.sections import ReportSession

    session = ReportSession.open(thin, tmp_path / "out")
    fig = session.timeline().fig
    drawn = {t.name.rsplit(" ", 1)[-1]: t for t in fig.data if t.name and t.name.startswith(SCRAPE.name)}
    assert set(GAUGES) <= set(drawn), sorted(drawn)
    for name in GAUGES:
        trace = drawn[name]
        assert trace.mode == "markers+text" and len(trace.y) == 1
        assert trace.y[0] == pytest.approx(_value(name))
        assert float(trace.text[0]) == pytest.approx(_value(name), rel=1e-3)
    panels = [k for k in fig.layout if re.fullmatch(r"yaxis\d+", k) and k != "yaxis"]
    assert panels and all(fig.layout[k].rangemode == "tozero" for k in panels)
    notes = [a.text for a in fig.layout.annotations]
    assert "no log lines and no stacks in this bundle" in notes
    empty_errors = figures.errors_figure(session.analysis)
    assert [a.text for a in empty_errors.layout.annotations] == ["no notable lines (warning or worse) in this bundle"]
    first = session.answer().body
    assert "Checked:" in first
    checked = re.findall(r"<li>(.*?)</li>", first.split("Checked:", 1)[1])
    assert len(checked) == len(session.analysis.checked()) >= 3
    assert "1 input" in checked[0]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_one_scrape_values_and_sentences_are_on_screen(thin: Path, browser: Any, size: tuple[int, int],
                                                       tmp_path_factory: pytest.TempPathFactory) -> None:
    from forensics.render import screens
    from forensics.report import render

    out = tmp_path_factory.mktemp("thin-out") / f"out-{size[0]}"
    rendered = render(thin, out, progress=False).out
    page = screens.open_offline(browser, rendered / "timeline.html", size).page
    texts = page.evaluate("() => [...document.querySelectorAll(\"div.js-plotly-plot[id$='timeline'] .textpoint\")]"
                          ".map(t => t.textContent)")
    for name in GAUGES:
        assert any(float(t) == pytest.approx(_value(name), rel=1e-3) for t in texts), (name, texts)
    notes = page.evaluate("() => [...document.querySelectorAll(\"div.js-plotly-plot[id$='timeline'] g.annotation\")]"
                          ".map(g => g.textContent)")
    assert "no log lines and no stacks in this bundle" in notes
    report = screens.open_offline(browser, rendered / "report.html", size).page
    first_screen = report.evaluate("() => document.body.innerText")
    lines = len(SCRAPE.read_text().splitlines())  # every line of the paste is a record read
    assert "No incident found" in first_screen and f"{lines} records read from 1 input" in first_screen
    page.context.close()
    report.context.close()


def test_lanes_of_plain_log_files_are_one_line_named_after_the_file(tmp_path: Path) -> None:
    """Two real SGLang logs with long file names and no host: every lane's name is one line of at
    most LANE_CHARS characters, starts with the file's name (no "?" for the missing host), keeps
    its rank at the end, and the full name is in the hover of the lane's cells."""
    from forensics.render.swimlanes import LANE_CHARS
    from forensics.render.sections import ReportSession

    names = ["server_log_skypilot_ray_prefix_dp2_tp2_2025-02-14.log", "server_log_disagg_dp_tp_ep_tags_quoted_2025-11-04.log"]
    bundle = tmp_path / "two-logs"
    (bundle / "logs").mkdir(parents=True)
    for name in names:
        shutil.copy(CORPUS / "logs" / name, bundle / "logs")
    fig = ReportSession.open(bundle, tmp_path / "out").timeline().fig
    ticks = [t.split(" (logs no batches)")[0] for t in fig.layout.yaxis.ticktext]
    assert ticks
    for tick in ticks:
        assert "<br>" not in tick and len(tick) <= LANE_CHARS and not tick.startswith("?")
        assert any(tick.startswith(Path(n).stem[:LANE_CHARS // 2 - 1]) for n in names), tick
        assert re.search(r"· (DP\d+ )?TP\d+$", tick), tick
    (strip,) = [t for t in fig.data if t.type == "heatmap"]
    hovers = {cell.replace("<br>", "") for row in strip.text for cell in row if cell}
    assert any(Path(names[0]).stem in h for h in hovers) and any(Path(names[1]).stem in h for h in hovers)


def test_a_freeze_in_a_log_naming_no_component_is_labelled_by_its_lane_not_none(tmp_path: Path) -> None:
    """Issue 53: the chart labelled a plain server.log's freeze "None last batch 07:11:02"."""
    from forensics.analyze import analyze
    from forensics.render.swimlanes import timeline_figure

    logs = tmp_path / "bundle" / "logs"
    logs.mkdir(parents=True)
    batch = "TP0] Decode batch. #running-req: 4, #token: 100, token usage: 0.01, gen throughput (token/s): 50.00, " \
            "#queue-req: 2,"
    (logs / "server.log").write_text("".join(f"[2026-06-18 21:30:{s:02d} {batch}\n" for s in range(0, 60, 2))
                                     + f"[2026-06-18 21:31:00 {batch}\n"
                                     "[2026-06-18 21:40:00] Received sigquit from a child process.\n")
    analysis = analyze(tmp_path / "bundle", tmp_path / "case")
    assert [f.component for f in analysis.findings if f.kind == "frozen"] == [None]
    labels = [a.text for a in timeline_figure(analysis).layout.annotations if "last batch" in (a.text or "")]
    assert labels == ["server · TP0 last batch 21:31:00"]  # its lane: the file, the rank


def test_progress_lines_of_no_named_component_are_not_said_to_be_missing(tmp_path: Path) -> None:
    """Issue 53: "No component logs progress lines" was printed beside a lane full of them."""
    from forensics.render.sections import ReportSession

    logs = tmp_path / "bundle" / "logs"
    logs.mkdir(parents=True)
    batch = "TP0] Decode batch. #running-req: 4, #token: 100, token usage: 0.01, gen throughput (token/s): 50.00, " \
            "#queue-req: 2,"
    (logs / "server.log").write_text("".join(f"[2026-06-18 21:30:{s:02d} {batch}\n" for s in range(0, 60, 2)))
    said = str(ReportSession.open(tmp_path / "bundle", tmp_path / "out").overview())
    assert "30 progress lines are logged, by no component the profile names" in said
    assert "No component logs progress lines" not in said


def test_redaction_leaves_the_title_the_user_wrote(tmp_path: Path) -> None:
    """Issue 53: "prefill-0" in a title the user wrote became "host-2"."""
    from forensics.render.sections import ReportSession
    from tests.test_report import REFERENCE

    bundle = tmp_path / "gpu-node-00-incident"
    shutil.copytree(REFERENCE, bundle)
    toml = (bundle / "incident.toml").read_text()
    (bundle / "incident.toml").write_text(toml.replace('title = "DeepSeek-V4-Flash PD wedge', 'title = "gpu-node-00 PD wedge', 1))
    written = ReportSession.open(bundle, tmp_path / "out", redact="all")
    assert "<h1>gpu-node-00 PD wedge" in written.header().body
    from forensics.render.text import title_redact

    def redactor(text: str) -> str:
        return text.replace("gpu-node-00", "host-1")

    assert title_redact(False, redactor) is redactor  # a title that is the bundle's name is evidence
