"""Writes that go wrong — an interrupt, a full disk, a read-only folder, a killed run — end in one
clear line and leave the previous outputs as they were."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import copy_report
from tests.test_report import REFERENCE

FORENSICS = Path(sys.executable).parent / "forensics"


def _report(out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(FORENSICS), "report", str(REFERENCE), "--out", str(out)], capture_output=True,
                          text=True, check=False, timeout=600)


def _digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and "case" not in p.parts}


def _stderr_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in done.stderr.splitlines() if line.startswith("forensics: ")]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    return lines[0]


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A small tmpfs of our own (root only: CI and ./run test run as root)."""
    mount = tmp_path / "small"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40m", "tmpfs", str(mount)], capture_output=True)
    if made.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_an_interrupted_report_leaves_the_previous_outputs(tmp_path: Path, reference_report: Path) -> None:
    out = copy_report(reference_report, tmp_path / "out")  # a report made there before
    before = _digests(out)
    running = subprocess.Popen([str(FORENSICS), "report", str(REFERENCE), "--out", str(out)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".out.partial-*/incident_report.ipynb")) and time.monotonic() < deadline:
        time.sleep(0.2)  # interrupt once the new outputs are being written
    running.send_signal(signal.SIGINT)
    _, stderr = running.communicate(timeout=120)
    assert running.returncode == 130, stderr[-2000:]
    assert _stderr_line(subprocess.CompletedProcess([], 130, "", stderr)) == \
        "forensics: interrupted; outputs already there were left as they were"
    assert _digests(out) == before
    assert not list(tmp_path.glob(".out.partial-*"))


def test_a_full_disk_ends_in_one_line_and_keeps_the_previous_outputs(tmpfs: Path, reference_report: Path) -> None:
    out = copy_report(reference_report, tmpfs / "out")  # a report made there before
    before = _digests(out)
    free = os.statvfs(tmpfs).f_bavail * os.statvfs(tmpfs).f_frsize
    (tmpfs / "ballast").write_bytes(b"\0" * (free - 2_000_000))  # room for less than a report
    done = _report(out)
    assert done.returncode in (1, 2)
    assert "No space left on device" in _stderr_line(done)
    assert _digests(out) == before and (out / "report.html").stat().st_size > 1_000_000
    assert not list(tmpfs.glob(".out.partial-*"))


def test_a_read_only_output_folder_ends_in_one_line(tmpfs: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    done = _report(tmpfs / "out")
    assert done.returncode in (1, 2)
    assert "Read-only file system" in _stderr_line(done)


def test_what_a_killed_run_left_aside_is_removed_by_the_next(tmp_path: Path) -> None:
    leftover = tmp_path / ".out.partial-killed"
    leftover.mkdir()
    (leftover / "report.html").write_text("half")
    assert _report(tmp_path / "out").returncode == 0
    assert not leftover.exists() and (tmp_path / "out" / "report.html").stat().st_size > 1_000_000


def test_files_a_person_added_to_the_output_folder_survive_a_new_report(tmp_path: Path,
                                                                          reference_report: Path) -> None:
    out = copy_report(reference_report, tmp_path / "out")  # a report made there before
    (out / "my-notes.md").write_text("why we restarted")
    assert _report(out).returncode == 0
    assert (out / "my-notes.md").read_text() == "why we restarted"
