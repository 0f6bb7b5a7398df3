"""Thousands of distinct error lines (each a template of its own, or a traceback of its own) in an
incident's window: a finding per distinct line made every output grow with them (100,000 distinct
1 KB lines: summary.json 36 MB, postmortem.md 22 MB, the text report 19 MB). At most
MAX_FINDINGS_OF_A_KIND findings of a kind are listed; one more finding counts the rest."""

from __future__ import annotations

import json
import random
import shutil
import string
from pathlib import Path

import pytest

from tests.test_report import REFERENCE

LINES = 2_000


def _bundle(folder: Path, traceback: bool) -> Path:
    bundle = folder / "bundle"
    shutil.copytree(REFERENCE, bundle)
    (bundle / "logs").mkdir()
    rng = random.Random(7)
    with open(bundle / "logs" / "server.log", "w") as out:
        for n in range(LINES):  # in the window, after the start at 21:34:47, each distinct in its letters
            words = " ".join("".join(rng.choice(string.ascii_lowercase) for _ in range(10)) for _ in range(20))
            at = f"[2026-06-18 21:{35 + n * 5 // LINES:02d}:{n * 300 // LINES % 60:02d}]"
            out.write(f"{at} ERROR: Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n"
                      f"ValueError: {words}\n" if traceback else f"{at} ERROR: engine failed {words}\n")
    return bundle


@pytest.mark.parametrize("traceback", [False, True], ids=["templates", "tracebacks"])
def test_a_finding_per_distinct_line_is_bounded_and_the_rest_counted(tmp_path: Path, traceback: bool) -> None:
    from forensics.render.text_report import report_text
    from forensics.detect import MAX_FINDINGS_OF_A_KIND
    from forensics.render import postmortem
    from forensics.render.sections import ReportSession

    session = ReportSession.open(_bundle(tmp_path, traceback), tmp_path / "out")
    analysis = session.analysis
    kind = "traceback" if traceback else "new_template"
    same = [f for f in analysis.findings if f.kind == kind]
    assert len(same) == MAX_FINDINGS_OF_A_KIND + 1  # 2,000 before
    (counted,) = [f for f in same if f.facts.get("left_out")]
    assert counted.facts["left_out"] >= LINES - MAX_FINDINGS_OF_A_KIND - 20  # (some are the reference's own)
    assert counted.text.startswith(f"… and {counted.facts['left_out']:,} more findings of this kind")
    assert counted.text.endswith(f"not listed one by one (only the first {MAX_FINDINGS_OF_A_KIND} of a kind are)")
    kept = [f for f in same if f is not counted]
    assert counted.at is not None and all(f.at <= counted.at for f in kept)  # the first in time are kept
    assert len(json.dumps(session.summary(), default=str)) < 200_000
    assert len(postmortem.draft(analysis)) < 100_000 and len(report_text(analysis)) < 100_000
    assert counted.text in postmortem.draft(analysis).replace("\\_", "_")


def test_a_hundred_findings_of_a_kind_are_left_as_they_are_and_one_more_is_counted() -> None:
    from forensics.detect import MAX_FINDINGS_OF_A_KIND, Finding, fold_findings

    few = [Finding("annotation", "wedge", None, None, f"note {n}") for n in range(MAX_FINDINGS_OF_A_KIND)]
    assert fold_findings(few) == few
    many = few + [Finding("annotation", "wedge", None, None, "one too many")]
    folded = fold_findings(many)
    assert folded[:-1] == few and folded[-1].facts == {"left_out": 1}
    assert folded[-1].text.startswith("… and 1 more finding of this kind (annotation), at no time the evidence gives")
