"""Issue 53, the page as an SRE reads it (4): the first screen of a job that is not SGLang. The
8-rank accelerate training run of ../shared/corpus3 (its c10d watchdog lines quoted per rank:
ranks 1, 2, 3, 5, 6, 7 time out in BROADCAST seq 78, ranks 0 and 4 never entered it), in
`logs/k8s-worker02/` as the SRE placed it, rendered by `forensics report` and read in Chromium at
1400×900:

- the first screen is one answer: the ranks in one state are one clause listing them, not a line
  per rank;
- no page says "profile sglang" for it: the header and the sources say no serving profile matched
  and name the layers that read it, and `forensics analyze` says the same.

And the torchinferno TP8 log (every rank prints the same c10d lines): the notable lines chart draws
each such line once with the ranks that wrote it, not a legend entry per rank."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.render.test_page_labels import (ASCEND_LOG, CORPUS3, NO_CORPORA, SIZE, corpus_bundle, open_page, readme_row,
                                           rendered)

pytestmark = NO_CORPORA
ACCELERATE = "c10d_watchdog_8rank_accelerate_desync_2v6_broadcast_seq78_vs_gloo_allgather_quoted_blocks.log"
TORCHINFERNO = "c10d_watchdog_fr_stacktrace_8rank_tp8_llama70b_warmup_rank7_missing_seq59958.log"
NO_PROFILE = "no serving profile matched; read with the layers "


@pytest.fixture(scope="module")
def accelerate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    bundle = corpus_bundle(tmp_path_factory.mktemp("page-first") / "c10d-accelerate",
                           {f"corpus3/flight/{ACCELERATE}": "logs/k8s-worker02"})
    return rendered(bundle)


def test_the_ranks_of_one_state_are_one_clause_on_the_first_screen(accelerate: Path, browser: Any) -> None:
    row = readme_row(CORPUS3, ACCELERATE)
    assert "Ranks 1,2,3,5,6,7: watchdog on `WorkNCCL(SeqNum=78, OpType=BROADCAST" in row
    assert "Culprits = ranks 0 and 4" in row
    page = open_page(browser, accelerate / "report.html")
    verdict = page.locator("p.verdict")
    assert verdict.count() == 1 and verdict.bounding_box()["y"] < SIZE[1]
    text = verdict.inner_text()
    assert text.count("ranks 1, 2, 3, 5, 6, 7") == 1 and "ranks 0, 4" in text, text
    # no rank of the six said on its own: one line for the finding, the ranks listed in it
    assert not re.search(r"\brank [123567]\b", text), text
    assert text.count("BROADCAST seq 78") <= 2, text  # the six in it, the two that never entered it
    page.context.close()


def test_a_job_no_serving_profile_matches_is_never_called_sglang(accelerate: Path, browser: Any) -> None:
    from forensics.analyze import analyze
    from forensics.render.text_report import report_text

    page = open_page(browser, accelerate / "report.html")
    header = page.locator("p.note").first.inner_text()
    assert NO_PROFILE in header and "torch_distributed" in header, header
    body = page.inner_text("body")
    assert "profile sglang" not in body
    facts = page.locator("th", has_text=re.compile("^profile$")).locator("xpath=following-sibling::td").inner_text()
    assert facts.startswith(NO_PROFILE), facts
    page.context.close()
    bundle = accelerate.parent / "c10d-accelerate"
    text = report_text(analyze(bundle, accelerate.parent / "text-case"))
    assert text.splitlines()[1].startswith(NO_PROFILE) and "profile sglang" not in text


def test_an_sglang_log_is_read_with_the_sglang_profile_and_says_so(tmp_path: Path) -> None:
    from forensics.analyze import analyze
    from forensics.render.text_report import report_text

    bundle = corpus_bundle(tmp_path / "ascend", {f"corpus2/logs/{ASCEND_LOG}": "logs/npu-node"})
    assert report_text(analyze(bundle, tmp_path / "case")).splitlines()[1] == "profile sglang"


def test_a_line_every_rank_writes_is_one_series_with_its_ranks(tmp_path: Path, browser: Any) -> None:
    assert "all 8 ranks `Terminating` 18:08:32.71–18:08:33.19" in readme_row(CORPUS3, TORCHINFERNO)
    log = (CORPUS3 / "flight" / TORCHINFERNO).read_text()
    terminating = {int(n) for n in re.findall(r"^\[rank(\d+)\]:\[F710 .*Terminating the process", log, re.M)}
    assert terminating == set(range(8))
    report = rendered(corpus_bundle(tmp_path / "c10d-torchinferno", {f"corpus3/flight/{TORCHINFERNO}": "logs/h100"}))
    page = open_page(browser, report / "report.html")
    names = page.evaluate("document.querySelector(\"div.js-plotly-plot[id$='errors']\").data.map(t => t.name)")
    fatal = [n for n in names if "[F710" in n]
    assert len(fatal) == 1 and fatal[0].startswith("? · ranks 0–7: [rank&lt;n&gt;]"), names
    assert not [n for n in names if re.search(r"\[rank\d+\]", n)], names  # no series of one rank's copy
    page.context.close()
