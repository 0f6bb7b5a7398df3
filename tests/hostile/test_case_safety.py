"""`--case` and `--out` never destroy what they did not make, and concurrent writers never leave a
case half-written."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from forensics.case import CASE_MARKER, ingest, load_case
from forensics.cli import main
from tests.hostile.test_bundle_reading import entries


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    folder = tmp_path / "bundle"
    (folder / "journal").mkdir(parents=True)
    (folder / "journal" / "a.export").write_bytes(entries(50))
    return folder


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("where", ["bundle", "parent", "user folder", "a file"])
def test_ingest_refuses_to_write_a_case_where_it_would_destroy_something(
        tmp_path: Path, bundle: Path, where: str, capsys: pytest.CaptureFixture[str]) -> None:
    user = tmp_path / "notes"
    user.mkdir()
    (user / "todo.txt").write_text("mine")
    (tmp_path / "file").write_text("mine too")
    target = {"bundle": bundle, "parent": tmp_path, "user folder": user,
              "a file": tmp_path / "file"}[where]
    before = _files(tmp_path)
    assert main(["ingest", str(bundle), "--case", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("forensics: ") and "refusing" in err and len(err.strip().splitlines()) == 1
    assert _files(tmp_path) == before  # nothing deleted, nothing written


def test_a_case_is_marked_and_only_a_marked_case_is_replaced(tmp_path: Path, bundle: Path) -> None:
    case = tmp_path / "case"
    ingest(bundle, case)
    assert (case / CASE_MARKER).is_file()
    ingest(bundle, case)  # replacing our own case is fine
    assert load_case(case).manifest["totals"]["events"] == 50
    assert not list(tmp_path.glob(".case.partial-*"))


def test_an_empty_folder_may_take_a_case(tmp_path: Path, bundle: Path) -> None:
    (tmp_path / "empty").mkdir()
    ingest(bundle, tmp_path / "empty")
    assert load_case(tmp_path / "empty").manifest["totals"]["events"] == 50


def test_leftovers_of_a_killed_writer_are_removed_by_the_next(tmp_path: Path, bundle: Path) -> None:
    leftover = tmp_path / ".case.partial-x1y2"
    (leftover / "events").mkdir(parents=True)
    ingest(bundle, tmp_path / "case")
    assert not leftover.exists()


def _ingest(args: tuple[str, str]) -> int:
    ingest(*args)
    return load_case(args[1]).manifest["totals"]["events"]


def test_concurrent_ingests_into_one_case_leave_a_whole_case(tmp_path: Path, bundle: Path) -> None:
    case = str(tmp_path / "case")
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        counts = pool.map(_ingest, [(str(bundle), case)] * 8)
    assert counts == [50] * 8
    opened = load_case(case)
    assert opened.events.collect().height == 50
    assert sorted(p.name for p in Path(case).iterdir()) == sorted(
        [CASE_MARKER, "events", "manifest.json", "quarantine", "samples", "stacks"])


def test_report_refuses_an_output_folder_holding_other_files(tmp_path: Path, bundle: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "report.html").write_text("my own report")
    (home / "thesis.tex").write_text("years of work")
    before = _files(home)
    assert main(["report", str(bundle), "--out", str(home)]) == 2
    assert "holds files that are not a forensics report (thesis.tex)" in capsys.readouterr().err
    assert _files(home) == before
    assert main(["report", str(bundle), "--out", str(bundle)]) == 2
    assert "it would replace the bundle" in capsys.readouterr().err


def test_a_case_inside_the_bundle_is_not_read_as_evidence(tmp_path: Path, bundle: Path) -> None:
    ingest(bundle, bundle / "case")
    manifest = ingest(bundle, bundle / "case")
    assert [e["path"] for e in manifest["inputs"]] == ["journal/a.export"]
    assert {"path": "case", "reason": "a forensics case or report folder (output, not evidence)"} in manifest["skipped"]
