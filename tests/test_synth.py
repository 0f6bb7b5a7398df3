"""The generator writes real, deterministic journal exports."""

from __future__ import annotations

from pathlib import Path

from forensics.sources.journal import journal_export
from forensics.lab.synth import write_export
from tests.conftest import journalctl, to_journal


def test_same_seed_same_bytes_and_systemd_accepts_them(tmp_path: Path) -> None:
    a = write_export(tmp_path / "a.export", 500, hosts=3, seed=11).read_bytes()
    b = write_export(tmp_path / "b.export", 500, hosts=3, seed=11).read_bytes()
    c = write_export(tmp_path / "c.export", 500, hosts=3, seed=12).read_bytes()
    assert a == b and a != c
    journal = to_journal(a, tmp_path)
    assert journalctl(journal, "export").count(b"\n__CURSOR=") + 1 == 500
    rows = journal_export.parse(tmp_path / "a.export").rows
    assert rows.height == 500 and rows.get_column("host").n_unique() == 3
