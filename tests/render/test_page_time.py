"""Issue 53, the page as an SRE reads it (3): evidence with no time of its own, and idle GPUs.
Bundles built from the corpora as the SRE built them (files copied, so each file's modification
time is the copy's), rendered by `forensics report`, read in Chromium at 1400×900:

- the 4-node Ascend py-spy set of ../shared/corpus3 (dumps without a capture header: which dump
  belongs to which minute is not recorded): no time axis is drawn ("Dec 5, 2026 18:42–18:50" was
  the copy time), the page says why, the header's date is not the files' modification date, and
  the four groups stuck the same way are one answer on the first screen;
- corpus2's MUSA driver-rank dump (a rank waiting in a broadcast) beside corpus3's DCGM scrape of
  an idle RTX 4000 Ada (`GPU_UTIL 0`): the first screen and the GPU panel say the GPU sat at 0 %
  beside the hang; corpus3's loaded T4 (`GPU_UTIL 91`) is said idle nowhere."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.render.test_page_labels import (CORPUS2, CORPUS3, NO_CORPORA, SIZE, TIMELINE, corpus_bundle, open_page,
                                           readme_row, rendered)

pytestmark = NO_CORPORA
ASCEND_SET = ("sglang_ascend_dp4x8_node99_DP0_TP0_decode_sync_5dumps.txt",
              "sglang_ascend_dp4x8_node103_DP1_TP8_idle_batch_sync_3dumps.txt",
              "sglang_ascend_dp4x8_node107_DP2_TP16_idle_batch_sync_3dumps.txt",
              "sglang_ascend_dp4x8_node111_DP3_TP24_idle_batch_sync_3dumps_no_final_newline.txt")
MUSA = "vllm_musa_tp8_broadcast_driver_rank_headerless_unindented.txt"
IDLE_SCRAPE = "dcgm_exporter_lke_rtx4000ada_hpa_load_k8s_pod_labels_port_forward_line.prom"
BUSY_SCRAPE = "dcgm_exporter_ericsson_t4_under_load_util91_no_help_type.prom"


@pytest.fixture(scope="module")
def ascend_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    bundle = corpus_bundle(tmp_path_factory.mktemp("page-time") / "ascend-pyspy",
                           {f"corpus3/pyspy/{name}": "stacks" for name in ASCEND_SET})
    return rendered(bundle)


@pytest.fixture(scope="module")
def musa_idle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    bundle = corpus_bundle(tmp_path_factory.mktemp("page-time") / "musa-dcgm",
                           {f"corpus2/pyspy/{MUSA}": "stacks", f"corpus3/metrics/{IDLE_SCRAPE}": "metrics/gpu-node_9400"})
    return rendered(bundle)


def _copied_days(report: Path) -> set[str]:
    """The days the bundle's files were copied on (their modification times), as a page would write them."""
    bundle = report.parent / report.name.removesuffix("-report")
    days = {datetime.fromtimestamp(p.stat().st_mtime, UTC) for p in bundle.rglob("*") if p.is_file()}
    return {f"{d:%Y-%m-%d}" for d in days} | {f"{d:%b} {d.day}, {d:%Y}" for d in days}


def _no_time_axis(page: Any) -> None:
    """No date or time is written under any panel, the axis says it is none, no hover shows a time."""
    ticks = page.evaluate(f"[...{TIMELINE}.querySelectorAll('.xtick text')].map(t => t.textContent)")
    assert ticks == [], ticks
    title = page.evaluate(f"[...{TIMELINE}.querySelectorAll('text')].filter(t => /^x[0-9]*title$/.test(t.getAttribute('class')))"
                          ".map(t => t.textContent)")
    assert any(t.startswith("no time axis") for t in title), title
    templates = page.evaluate(f"{TIMELINE}._fullData.map(t => t.hovertemplate || '')")
    assert not [t for t in templates if "%{x" in t], templates
    note = page.locator("p.no-time-axis").inner_text()
    assert note.startswith("No time axis: nothing in this bundle carries a time of its own")


def test_dumps_with_no_time_of_their_own_get_no_invented_axis_and_the_page_says_why(ascend_set: Path,
                                                                                   browser: Any) -> None:
    readme = " ".join((CORPUS3 / "README.md").read_text().split())
    assert "(Which dump belongs to which minute is not recorded; the dumps are from the same commit.)" in readme
    for page_name in ("report.html", "timeline.html"):
        page = open_page(browser, ascend_set / page_name)
        _no_time_axis(page)
        note = page.locator("p.no-time-axis").inner_text()
        dumps = sum(line.startswith("Process ") for name in ASCEND_SET
                    for line in (CORPUS3 / "pyspy" / name).read_text().splitlines())
        assert f"{dumps} py-spy dumps without a capture header" in note, note  # 5 + 3 + 3 + 3
        body = page.inner_text("body")
        copied = _copied_days(ascend_set)
        header = body.split("Timeline", 1)[0]
        assert not [day for day in copied if day in header], (copied, header[:300])
        page.context.close()
    page = open_page(browser, ascend_set / "report.html")
    assert "date unknown (nothing carries a time of its own)" in page.locator("p.note").first.inner_text()
    page.context.close()


def test_four_groups_stuck_alike_are_one_answer_on_the_first_screen(ascend_set: Path, browser: Any) -> None:
    assert "identical in all 5 samples" in readme_row(CORPUS3, ASCEND_SET[0]).lower()
    page = open_page(browser, ascend_set / "report.html")
    verdict = page.locator("p.verdict")
    assert verdict.count() == 1 and verdict.bounding_box()["y"] < SIZE[1]
    text = verdict.inner_text()
    assert text.count("py-spy showed") == 1, text  # not one sentence per group (rank)
    for group in ("DP0", "DP1", "DP2", "DP3"):
        assert group in text, text
    page.context.close()


def test_an_idle_gpu_beside_a_hang_is_said_on_the_first_screen_and_its_panel(musa_idle: Path,
                                                                            browser: Any) -> None:
    assert "GPU_UTIL 0" in readme_row(CORPUS3, IDLE_SCRAPE)
    assert "rank 0 (PID 9923) in `_get_driver_input_and_broadcast`" in readme_row(CORPUS2, MUSA)
    page = open_page(browser, musa_idle / "report.html")
    idle = page.locator("p.gpu-idle")
    said = idle.inner_text()
    assert said.startswith("Idle: GPU 0 on ") and "at 0 % utilisation (DCGM_FI_DEV_GPU_UTIL" in said, said
    assert "beside the hang" in said and idle.bounding_box()["y"] < SIZE[1]  # on the first screen
    titles = page.evaluate(f"[...{TIMELINE}.querySelectorAll('g.annotation')].map(g => g.textContent)")
    assert any(t.startswith("GPU utilisation (%) — idle: GPU 0 on ") for t in titles), titles
    _no_time_axis(page)  # neither the dump nor the scrape says when it was taken
    page.context.close()


def test_a_busy_gpu_is_said_idle_nowhere(tmp_path: Path) -> None:
    from forensics.render.sections import ReportSession

    assert "GPU_UTIL **91**" in readme_row(CORPUS3, BUSY_SCRAPE)
    bundle = corpus_bundle(tmp_path / "musa-busy", {f"corpus2/pyspy/{MUSA}": "stacks",
                                                     f"corpus3/metrics/{BUSY_SCRAPE}": "metrics/cp-bm14r7_9400"})
    session = ReportSession.open(bundle, tmp_path / "out")
    assert "Idle:" not in str(session.answer())
    titles = [a.text for a in session.timeline().fig.layout.annotations]
    assert "GPU utilisation (%)" in titles and not [t for t in titles if "idle" in (t or "")]


@pytest.mark.parametrize(("scrape", "idle"), [(IDLE_SCRAPE, True), (BUSY_SCRAPE, False)])
def test_the_text_report_says_the_idle_gpu_as_the_page_does(tmp_path: Path, scrape: str, idle: bool) -> None:
    """`forensics analyze` prints what the first screen says beside the hang: the scrape of the idle
    RTX 4000 Ada (`GPU_UTIL 0`) is said idle beside the MUSA dump's wait; the loaded T4 (91) is not."""
    from forensics.analyze import analyze
    from forensics.render.text_report import report_text

    assert ("GPU_UTIL 0" if idle else "GPU_UTIL **91**") in readme_row(CORPUS3, scrape)
    bundle = corpus_bundle(tmp_path / "bundle", {f"corpus2/pyspy/{MUSA}": "stacks",
                                                 f"corpus3/metrics/{scrape}": "metrics/gpu-node_9400"})
    idle_lines = [line for line in report_text(analyze(bundle, tmp_path / "case")).splitlines()
                  if line.startswith("Idle: ")]
    if idle:
        assert len(idle_lines) == 1 and idle_lines[0].startswith("Idle: GPU 0 on "), idle_lines
        assert "at 0 % utilisation (DCGM_FI_DEV_GPU_UTIL, the last sample) beside the hang" in idle_lines[0]
    else:
        assert idle_lines == []
