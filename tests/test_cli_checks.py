"""A command's own choices fail before any work, in one line; a failed render keeps its executed
notebook where its message says; nothing is left beside the outputs (no lock files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from forensics.cli import main
from forensics.report import ReportError, render
from tests.test_report import REFERENCE


@pytest.mark.parametrize(("flags", "said"), [
    (["--display-tz", "Mars/Base"], "--display-tz 'Mars/Base': not a time zone"),
    (["--profile", "nope"], "no profile named 'nope'; shipped: sglang, vllm"),
])
def test_a_bad_choice_stops_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str],
                                            said: str) -> None:
    assert main(["report", str(REFERENCE), "--out", str(tmp_path / "out"), *flags]) == 2
    assert said in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and list(tmp_path.iterdir()) == []  # nothing made, no case ingested


def test_a_failed_render_keeps_its_notebook_where_the_message_says(tmp_path: Path) -> None:
    with pytest.raises(ReportError) as raised:
        render(REFERENCE, tmp_path / "out", redact="bogus", progress=False)
    kept = tmp_path / "out" / "incident_report.failed.ipynb"
    assert f"(executed copy with the traceback: {kept})" in str(raised.value) and kept.is_file()
    assert "redact must be one of" in kept.read_text()


def test_no_lock_file_is_left_beside_the_outputs(reference_report: Path) -> None:
    """The session's rendering of the reference incident, made into a folder of its own (the
    fixture's `render(REFERENCE, folder / "out")`, which other tests only read or copy)."""
    assert sorted(p.name for p in reference_report.parent.iterdir()) == ["out"]
    assert not [p.name for p in reference_report.iterdir() if p.name.endswith(".lock")]
