"""A bundle's journal folder laid out as hosts keep theirs: `journal/<host>/x.journal` (a folder
per host, as a copy of /var/log/journal/<machine-id>/ renamed). systemd's own directory reading takes
only machine-id named folders, so the reader names every journal file instead: each entry
`journalctl` itself prints from the same files is read, under either path and either reader."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from forensics.lab.synth import write_export
from forensics.sources.journal import journal_native
from tests.conftest import to_journal


@pytest.fixture(scope="module")
def journal_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("journals")
    for n, host in enumerate(("node-a", "node-b")):  # a folder per host, as the bundle is laid out
        export = write_export(root / f"{host}.export", 300, seed=n)
        (root / "journal" / host).mkdir(parents=True)
        made = to_journal(export.read_bytes(), root / "journal" / host, name="system")
        (made.parent / "system.export").unlink()
    return root / "journal"


def _journalctl_count(folder: Path) -> int:
    files = [f"--file={p}" for p in sorted(folder.rglob("*.journal"))]
    out = subprocess.run(["journalctl", *files, "-o", "json", "--no-pager", "-q"], check=True,
                         capture_output=True).stdout
    return sum(1 for line in out.splitlines() if json.loads(line))


@pytest.mark.parametrize("program", ["journalctl", ""], ids=["through journalctl", "python-systemd"])
def test_every_entry_of_a_folder_per_host_is_read(journal_folder: Path, monkeypatch: pytest.MonkeyPatch,
                                                  program: str) -> None:
    monkeypatch.setenv(journal_native.JOURNALCTL_ENV, program)
    expected = _journalctl_count(journal_folder)
    assert expected == 600  # journalctl's own count of the two files: 300 entries each
    assert journal_native.sniff(b"", journal_folder)
    result = journal_native.parse(journal_folder)
    assert result.rows.height == expected and result.records == expected
