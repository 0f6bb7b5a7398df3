"""Evidence excerpts quote whole lines (issue 51, item 8): a line up to `EVIDENCE_CHARS` is kept as
the file holds it, never cut at 80 mid-word; a longer one ends at a word boundary, marked "…".
The expected text is the evidence file's own line (a corpus file read in place, a public report's
line), never what the suite printed."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from forensics.analyze import analyze
from forensics.detect import CUT_MARK, EVIDENCE_CHARS, excerpt
from forensics.profiles import load_profile

CORPUS3 = Path(os.environ.get("FORENSICS_CORPUS3", Path(__file__).resolve().parents[3] / "shared" / "corpus3"))
# c10d's watchdog and PG-status lines of two DeepSpeed ranks (the corpus3 README's row of the file)
WATCHDOG = "c10d_watchdog_2rank_deepspeed_pg1_broadcast_seq1_never_completed_interleaved_terminate.log"
FIRST_LINE = ("[rank0]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 0] Watchdog caught collective "
              "operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=131072000, NumelOut=131072000, "
              "Timeout(ms)=600000) ran for 600081 milliseconds before timing out.")


@pytest.mark.skipif(not (CORPUS3 / "flight" / WATCHDOG).is_file(), reason=f"no corpus at {CORPUS3}")
def test_a_watchdog_lines_evidence_is_the_line_whole(tmp_path: Path) -> None:
    folder = tmp_path / "bundle" / "logs"
    folder.mkdir(parents=True)
    shutil.copy(CORPUS3 / "flight" / WATCHDOG, folder / WATCHDOG)
    analysis = analyze(tmp_path / "bundle", tmp_path / "case")
    lines = (CORPUS3 / "flight" / WATCHDOG).read_text().splitlines()
    quoted = [(e.line, e.excerpt) for f in analysis.findings for e in f.evidence if e.line]
    assert quoted
    long = [(n, text) for n, text in quoted if len(lines[n - 1]) > 80]
    assert long, "no evidence line of this file is longer than 80 characters"
    for n, text in quoted:
        assert len(lines[n - 1]) <= EVIDENCE_CHARS and text == lines[n - 1], n
    # the watchdog's own words, whole (the README: "SeqNum=1, OpType=BROADCAST, NumelIn=131072000")
    assert any("Watchdog caught collective operation timeout" in text and text.endswith("before timing out.")
               for _, text in long)


def _cut_well(line: str, text: str) -> None:
    """`text` is `line` cut at a word boundary within the bound, and says so."""
    assert len(text) <= EVIDENCE_CHARS and text.endswith(CUT_MARK)
    kept = text[:-len(CUT_MARK)]
    assert line.startswith(kept) and line[len(kept)] == " ", line[len(kept) - 10:len(kept) + 10]
    assert len(kept) > EVIDENCE_CHARS // 2  # most of the bound used, not a stub


def test_a_line_longer_than_the_bound_is_cut_at_a_word_and_marked() -> None:
    # SGLang's request log, a `Finish:` line of 2,700 characters (sgl-project/sglang#25887: the
    # profile's request_timeout sample, copied from that report)
    (line,) = [s.line for s in load_profile("sglang").logs.samples
               if s.origin == "https://github.com/sgl-project/sglang/issues/25887"]
    assert len(line) > EVIDENCE_CHARS
    _cut_well(line, excerpt(line))


def test_a_folded_record_keeps_its_whole_first_lines() -> None:
    """A record that holds several lines (a folded traceback) keeps the lines that fit, whole, and
    marks that more followed."""
    # the corpus3 watchdog file's first line, then a line too long for the bound
    second = "x" * EVIDENCE_CHARS
    assert excerpt(f"{FIRST_LINE}\n{second}") == f"{FIRST_LINE}\n{CUT_MARK}"
    assert excerpt(FIRST_LINE) == FIRST_LINE


@pytest.mark.skipif(not (CORPUS3 / "flight" / WATCHDOG).is_file(), reason=f"no corpus at {CORPUS3}")
def test_the_folded_records_first_line_is_the_corpus_line() -> None:
    """The line the test above folds is the corpus file's own first line (no line made up)."""
    assert (CORPUS3 / "flight" / WATCHDOG).read_text().splitlines()[0] == FIRST_LINE
