"""The `forensics` command as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from forensics.cli import main
from tests.conftest import REPO


def _forensics(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forensics.cli", *args], cwd=cwd, capture_output=True, text=True,
                          check=False)


def test_ingest_prints_the_accounting_and_skips_by_name(tmp_path: Path) -> None:
    done = _forensics("ingest", str(REPO / "data/incidents/sample-sglang"), "--case", str(tmp_path / "c"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "records seen 6,304 = parsed 6,301 + quarantined 3; 299 duplicates" in done.stdout
    assert "skipped notes.txt: not a recognised input" in done.stdout
    assert "sglang-dsv4-decode.service" in done.stdout
    summary = _forensics("summary", str(tmp_path / "c"), cwd=tmp_path)
    assert summary.stdout == done.stdout


def test_ingest_defaults_to_the_user_cache_not_the_current_folder(tmp_path: Path) -> None:
    import os

    done = subprocess.run([str(Path(sys.executable).parent / "forensics"), "ingest",
                           str(REPO / "data/incidents/sample-sglang")], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}, check=False)
    assert done.returncode == 0, done.stderr
    (case,) = (tmp_path / "cache" / "forensics").glob("sample-sglang-*/case")
    assert (case / "manifest.json").is_file() and f"case: {case}" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]


def test_errors_are_one_line_naming_the_place(tmp_path: Path) -> None:
    done = _forensics("summary", str(tmp_path / "nothing"), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"forensics: {tmp_path / 'nothing'}: not a case (no manifest.json); create one "
                                   f"with `forensics ingest BUNDLE --case {tmp_path / 'nothing'}`")


def test_stacks_command_takes_groups_and_sizes_and_names_bad_ones(tmp_path: Path) -> None:
    reference = REPO / "data" / "incidents" / "dsv4-pd-wedge-2026-06-18"
    done = _forensics("stacks", str(reference), "--expect", "decode=5", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "TP4: no dump of this rank in the bundle" in done.stdout
    assert "The verdict holds whatever the missing ranks show." in done.stdout
    bad = _forensics("stacks", str(reference), "--group", "decode=12,x", cwd=tmp_path)
    assert (bad.returncode, bad.stderr.strip()) == (
        2, "forensics: --group 'decode=12,x': write GROUP=PID,PID,…, e.g. decode=4242,4243")


def test_analyze_from_an_empty_folder_leaves_it_empty_and_says_where_the_case_went(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.test_report import REFERENCE

    here, cache = tmp_path / "here", tmp_path / "cache"
    here.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    assert main(["analyze", str(REFERENCE)]) == 0
    assert list(here.iterdir()) == []
    said = capsys.readouterr().err
    (case,) = cache.glob("forensics/dsv4-pd-wedge-2026-06-18-*/case")
    assert f"case: {case}" in said and (case / "manifest.json").is_file()


def test_help_does_not_import_the_data_stack() -> None:
    import subprocess
    import sys

    code = ("import sys; from forensics.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('polars', 'numpy', 'pyarrow', 'plotly') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_the_readme_headline_is_what_analyze_brief_prints(tmp_path: Path) -> None:
    """The README's headline block cannot drift: it is `forensics analyze --brief` of the reference,
    and that says the reference README's times (decode's last batch 21:34:47, prefill's 21:39:07,
    the restart 21:40:45, healthy at 21:42:00)."""
    reference = REPO / "data" / "incidents" / "dsv4-pd-wedge-2026-06-18"
    done = _forensics("analyze", str(reference), "--brief", "--case", str(tmp_path / "case"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for time in ("decode froze at 21:34:47", "prefill froze at 21:39:07", "21:40:45", "21:42:00"):
        assert time in done.stdout
    readme = (REPO / "README.md").read_text()
    block = readme.split("--brief` prints it:\n\n```\n", 1)[1].split("```", 1)[0]
    assert block == done.stdout
