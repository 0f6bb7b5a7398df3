"""Batch plumbing without papermill: which folders are bundles, unique output names, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from forensics.cli import main
from forensics.report import ReportError, _out_names, find_bundles, notebook_path


def _bundle(path: Path, marker: str = "journal") -> Path:
    (path / marker).mkdir(parents=True)
    return path


def test_folders_globs_and_folders_of_bundles(tmp_path: Path) -> None:
    a = _bundle(tmp_path / "incidents" / "a")
    b = _bundle(tmp_path / "incidents" / "b", "metrics")
    (tmp_path / "incidents" / "notes").mkdir()  # not a bundle: skipped inside a folder of bundles
    c = tmp_path / "single"
    c.mkdir()
    (c / "incident.toml").write_text('title = "c"\n')
    found = find_bundles([str(tmp_path / "incidents"), str(tmp_path / "sing*"), str(a)])
    assert found == [a.resolve(), b.resolve(), c.resolve()]  # a listed twice, kept once


def test_what_is_not_a_bundle_is_named(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportError, match="empty: neither a bundle nor a folder of bundles"):
        find_bundles([str(tmp_path / "empty")])
    with pytest.raises(ReportError, match="nowhere: no such folder"):
        find_bundles([str(tmp_path / "nowhere")])


def test_two_bundles_with_one_name_get_two_folders(tmp_path: Path) -> None:
    assert _out_names([tmp_path / "x" / "inc", tmp_path / "y" / "inc", tmp_path / "inc-2"]) == \
        ["inc", "inc-2", "inc-2-2"]


def test_report_of_a_missing_folder_fails_clearly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "missing: not a folder" in capsys.readouterr().err


def test_a_missing_notebook_names_the_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import forensics.report as report
    monkeypatch.setattr(report, "NOTEBOOKS", tmp_path)
    with pytest.raises(ReportError, match="set FORENSICS_NOTEBOOKS"):
        notebook_path()


def test_batch_takes_every_folder_analyze_takes(tmp_path: Path) -> None:
    """Issue 51: a logs-only bundle, or a folder of files as copied off a box, aborted the batch."""
    (tmp_path / "incidents" / "logs-only" / "logs").mkdir(parents=True)
    (tmp_path / "incidents" / "logs-only" / "logs" / "server.log").write_text("[2026-06-18 21:30:00] started\n")
    (tmp_path / "incidents" / "loose-files").mkdir()
    (tmp_path / "incidents" / "loose-files" / "events.txt").write_text("LAST SEEN   TYPE   REASON   OBJECT   MESSAGE\n")
    (tmp_path / "incidents" / "README.md").write_text("our incidents\n")
    assert [p.name for p in find_bundles([str(tmp_path / "incidents")])] == ["logs-only", "loose-files"]
