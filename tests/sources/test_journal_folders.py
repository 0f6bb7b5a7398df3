"""A bundle's journal folder laid out as hosts keep theirs: `journal/<host>/x.journal` (a folder
per host, as a copy of /var/log/journal/<machine-id>/ renamed). systemd's own directory reading takes
only machine-id named folders, so the reader names every journal file instead: each entry
`journalctl` itself prints from the same files is read, under either path and either reader."""

from __future__ import annotations

import json
import shutil
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


@pytest.fixture(scope="module")
def rotated_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One host's journal as journald keeps it after rotations: several files, each made by
    systemd-journal-remote from a part of one export (its entries in time order)."""
    root = tmp_path_factory.mktemp("rotated")
    export = write_export(root / "whole.export", 900, seed=3).read_bytes()
    entries = [e + b"\n\n" for e in export.split(b"\n\n") if e.strip()]
    folder = root / "journal"
    folder.mkdir()
    for n, start in enumerate(range(0, len(entries), 300)):
        made = to_journal(b"".join(entries[start:start + 300]), folder, name=f"system@{n:016x}")
        (made.parent / f"system@{n:016x}.export").unlink()
    # the newest first by name, as journald's active `system.journal` sorts before `system@…`
    (folder / f"system@{2:016x}.journal").rename(folder / "system.journal")
    return folder


def _cursors(result) -> list[str]:
    from forensics.sources.journal.cursor import whole_cursor

    return result.rows.select(whole_cursor()).to_series().to_list()


@pytest.mark.parametrize("at_once", [1, 2, 3])
def test_a_folder_s_files_read_apart_give_journalctl_s_entries_in_time_order(
        rotated_folder: Path, monkeypatch: pytest.MonkeyPatch, at_once: int) -> None:
    """Each file by a journalctl of its own, `at_once` at a time: the entries journalctl prints when
    it merges the three files itself, in the same order (the files ordered by their headers'
    first entries, not by name)."""
    monkeypatch.setattr(journal_native, "FILES_AT_ONCE", at_once)
    files = [f"--file={p}" for p in sorted(rotated_folder.glob("*.journal"))]
    merged = subprocess.run(["journalctl", *files, "-o", "json", "--no-pager", "-q", "--output-fields=__CURSOR"],
                            check=True, capture_output=True).stdout
    expected = [json.loads(line)["__CURSOR"] for line in merged.splitlines()]
    assert len(expected) == 900
    result = journal_native.parse(rotated_folder)
    assert result.damage is None and result.records == 900
    assert _cursors(result) == expected


def test_a_file_systemd_cannot_open_leaves_the_folder_s_other_files_read(rotated_folder: Path, tmp_path: Path) -> None:
    """journalctl given every file refuses them all when one cannot be opened; read apart, the
    others are read and the broken one is the input's damage, named."""
    folder = tmp_path / "journal"
    shutil.copytree(rotated_folder, folder)
    broken = folder / "broken.journal"
    broken.write_bytes(b"LPKSHHRH" + b"\0" * 100)
    files = [f"--file={p}" for p in sorted(folder.glob("*.journal"))]
    together = subprocess.run(["journalctl", *files, "-o", "export", "--no-pager", "-q"], capture_output=True)
    assert together.returncode != 0 and not together.stdout  # what one journalctl for all of them does
    result = journal_native.parse(folder)
    assert result.records == result.rows.height == 900
    assert result.damage is not None and result.damage.startswith(f"{broken}: systemd cannot open it as a journal")


def test_streams_in_turn_keep_their_order_raise_where_they_fail_and_stop_the_rest() -> None:
    import threading

    from forensics.sources import ParseResult
    from forensics.sources.common.schema import EVENTS_SCHEMA, QUARANTINE_SCHEMA, empty

    started: list[int] = []
    lock = threading.Lock()

    def parts(index: int, count: int, fail: bool = False):
        def stream():
            with lock:
                started.append(index)
            for n in range(count):
                yield ParseResult("events", empty(EVENTS_SCHEMA), empty(QUARANTINE_SCHEMA), records=index * 100 + n)
            if fail:
                raise ValueError(f"stream {index} broke")
        return stream

    got = [p.records for p in journal_native.streams_in_turn([parts(0, 3), parts(1, 2), parts(2, 1)], 2)]
    assert got == [0, 1, 2, 100, 101, 200]
    # more streams than threads, each done at once: a later one never takes an earlier one's turn
    done: list[list[int]] = []
    reader = threading.Thread(target=lambda: done.append(
        [p.records for p in journal_native.streams_in_turn([parts(i, 1) for i in range(7)], 2, ahead=1)]))
    reader.start()
    reader.join(timeout=60)
    assert done == [[0, 100, 200, 300, 400, 500, 600]]
    started.clear()
    seen = []
    with pytest.raises(ValueError, match="stream 1 broke"):
        for part in journal_native.streams_in_turn([parts(0, 1), parts(1, 1, fail=True)] + [parts(i, 1) for i in
                                                                                          range(2, 40)], 2):
            seen.append(part.records)
    assert seen == [0, 100]
    assert len(started) < 40  # the streams after the failure were not all read


def test_a_folder_s_rows_are_numbered_as_its_files_exports_put_end_to_end(rotated_folder: Path) -> None:
    """A row's line and byte are where its entry starts in the exports of the folder's files, in
    the order they are read (their first entries' time), put end to end: one place per entry."""
    from forensics.sources.journal.cursor import whole_cursor

    ordered = sorted(rotated_folder.glob("*.journal"), key=journal_native.head_realtime)
    text = b"".join(subprocess.run(["journalctl", "--file", str(f), "-o", "export"], check=True,
                                   capture_output=True).stdout for f in ordered)
    lines = text.split(b"\n")
    rows = journal_native.parse(rotated_folder).rows.select(whole_cursor(), "source_line", "source_offset")
    assert rows.get_column("source_line").n_unique() == rows.height == 900
    for cursor, line, offset in rows.iter_rows():
        assert lines[line - 1] == f"__CURSOR={cursor}".encode()
        assert text[offset:offset + 9 + len(cursor)] == f"__CURSOR={cursor}".encode()


def test_a_folder_none_of_whose_files_opens_is_refused(tmp_path: Path) -> None:
    from forensics.errors import ParseError

    folder = tmp_path / "journal"
    folder.mkdir()
    for name in ("a.journal", "b.journal"):
        (folder / name).write_bytes(b"LPKSHHRH" + b"\0" * 100)
    with pytest.raises(ParseError, match="systemd cannot open any of its journal files"):
        journal_native.parse(folder)
