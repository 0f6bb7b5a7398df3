"""The `forensics` command as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def _forensics(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forensics.cli", *args], cwd=cwd, capture_output=True, text=True,
                          check=False)


def test_ingest_prints_the_accounting_and_skips_by_name(tmp_path: Path) -> None:
    done = _forensics("ingest", str(REPO / "data/incidents/sample-sglang"), "--case", str(tmp_path / "c"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "records seen 6,304 = parsed 6,300 + quarantined 4; 299 duplicates" in done.stdout
    assert "skipped notes.txt: not a recognised input" in done.stdout
    assert "sglang-dsv4-decode.service" in done.stdout
    summary = _forensics("summary", str(tmp_path / "c"), cwd=tmp_path)
    assert summary.stdout == done.stdout


def test_ingest_defaults_to_exports_folder(tmp_path: Path) -> None:
    done = _forensics("ingest", str(REPO / "data/incidents/sample-sglang"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "exports/sample-sglang/case/manifest.json").is_file()


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
