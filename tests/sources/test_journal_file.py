"""A journal file written out by `_journal_file` is byte for byte what `journalctl --file F -o export`
prints (systemd's own tool, the oracle), on real files made by systemd-journal-remote: compact and
regular layouts, zstd-compressed and plain fields, keyed and unkeyed hashes; and on files damaged in
their structure, where journalctl takes over and its judgement of the damage stands."""

from __future__ import annotations

import io
import os
import random
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from forensics.errors import ParseError
from forensics.lab.synth import entries, write_export_entry
from forensics.sources.journal import _journal_file, journal_native
from tests.conftest import JOURNAL_REMOTE, export_entry
from tests.sources.test_journal_conformance import _special_entries

T0 = 1781819487000000
# How systemd-journal-remote is asked for each layout (systemd 252's environment switches).
LAYOUTS = {
    "compact, zstd, keyed hash": ({}, []),
    "regular": ({"SYSTEMD_JOURNAL_COMPACT": "0"}, []),
    "no compression": ({}, ["--compress=no"]),
    "regular, unkeyed hash": ({"SYSTEMD_JOURNAL_COMPACT": "0", "SYSTEMD_JOURNAL_KEYED_HASH": "0"}, []),
}


def _odd_entries() -> bytes:
    """Values at the edges of journalctl's text-or-binary rule, and fields long enough for journald
    to compress (over 512 bytes; one over the 64 KiB a reader's data threshold defaults to)."""
    def entry(i: int, *more: tuple[str, bytes | str]) -> bytes:
        return export_entry(("__REALTIME_TIMESTAMP", str(T0 + i)), ("__MONOTONIC_TIMESTAMP", str(9_000_000 + i)),
                            ("_BOOT_ID", "ab" * 16), *more)

    values: list[bytes | str] = [
        "x" * 100_000, "y" * 70_000 + "\x01", "del\x7f", "c1 \u0085 x", "nonchar \ufdd0 x", "emoji \U0001F600",
        "\uffff at the end \ufffe", b"surrogate \xed\xa0\x80", b"overlong \xc0\xaf", b"cut \xe2\x82", "tab\tok",
        "carriage\rreturn", "a" * 600, "",
    ]
    return b"".join(entry(i, ("MESSAGE", v), ("OTHER", "b" * 513)) for i, v in enumerate(values))


def _journal(folder: Path, layout: str) -> Path:
    generated = io.BytesIO()
    for fields in entries(200, hosts=2, seed=11):
        write_export_entry(generated, fields)
    source = folder / "entries.export"
    if not source.exists():
        source.write_bytes(_special_entries() + generated.getvalue() + _odd_entries())
    env, flags = LAYOUTS[layout]
    journal = folder / f"{layout.replace(', ', '-').replace(' ', '_')}.journal"
    subprocess.run([str(JOURNAL_REMOTE), f"--output={journal}", *flags, str(source)], check=True,
                   capture_output=True, env={**os.environ, **env})
    return journal


@pytest.fixture(scope="module")
def journals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("journal-files")
    return {layout: _journal(folder, layout) for layout in LAYOUTS}


def _journalctl(path: Path) -> bytes:
    return subprocess.run(["journalctl", f"--file={path}", "-o", "export", "--no-pager", "-q"],
                          capture_output=True).stdout


def _read(path: Path, program: str | None = "journalctl", size: int = 1 << 20, damaged: bool = False
          ) -> tuple[bytes, bool]:
    """The export `_FileExport` gives, read `size` bytes at a time, and whether journalctl took over
    (which, when `damaged`, may have said why it stopped)."""
    out, buffer = bytearray(), memoryview(bytearray(size))
    with journal_native._FileExport(program, path) as reader:
        while got := reader.readinto(buffer):
            out += buffer[:got]
        try:
            reader.raise_damage()
        except ParseError as error:
            if not (damaged and reader._rest is not None and ("journalctl stopped after" in str(error)
                                                              or journal_native.CANNOT_OPEN in str(error))):
                raise
        return bytes(out), reader._rest is not None


def _header_flags(path: Path) -> str:
    header = subprocess.run(["journalctl", "--header", f"--file={path}"], capture_output=True, text=True).stdout
    return next(line for line in header.splitlines() if line.startswith("Incompatible flags"))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_healthy_file_is_written_as_journalctl_exports_it_without_journalctl(journals: dict[str, Path],
                                                                                layout: str) -> None:
    journal = journals[layout]
    expected = _journalctl(journal)
    assert expected.count(b"\n__CURSOR=") + 1 == 6 + 200 + 14  # every entry systemd-journal-remote was given
    ours, handed_on = _read(journal)
    assert not handed_on and ours == expected
    assert _read(journal, size=333)[0] == expected  # entries longer than a read come in parts
    compressed = "COMPRESSED-ZSTD" in _header_flags(journal)
    assert compressed == (layout != "no compression") and ("COMPACT" in _header_flags(journal)) == layout.startswith(
        ("compact", "no compression"))


def test_journalctl_takes_over_a_journal_this_reader_does_not_know(journals: dict[str, Path], tmp_path: Path) -> None:
    """A header flag saying lz4 (systemd's other compressions are read by journalctl only): journalctl
    reads it whole, from the first byte."""
    data = bytearray(journals["compact, zstd, keyed hash"].read_bytes())
    flags = struct.unpack_from("<I", data, 12)[0]
    struct.pack_into("<I", data, 12, flags | 2)
    lz4 = tmp_path / "lz4.journal"
    lz4.write_bytes(bytes(data))
    assert "COMPRESSED-LZ4" in _header_flags(lz4)
    ours, handed_on = _read(lz4)
    assert handed_on and ours == _journalctl(lz4)


def test_a_journalctl_that_hangs_ends_the_file_with_the_stall_said(journals: dict[str, Path], tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """journalctl taking over (a flag this reader does not know) and then writing nothing — stopped
    here by SIGSTOP, as a hang on a hostile file would leave it — ends that file's reading after the
    stall bound, with the stall said; the ingest does not hang with it."""
    data = bytearray(journals["compact, zstd, keyed hash"].read_bytes())
    struct.pack_into("<I", data, 12, struct.unpack_from("<I", data, 12)[0] | 2)
    bundle = tmp_path / "bundle" / "journal"
    bundle.mkdir(parents=True)
    (bundle / "lz4.journal").write_bytes(bytes(data))
    stopping = tmp_path / "journalctl"
    stopping.write_text('#!/bin/sh\ncase "$*" in *--header*) exec journalctl "$@";; esac\n'
                        'kill -STOP $$\nexec journalctl "$@"\n')
    stopping.chmod(0o755)
    monkeypatch.setenv(journal_native.JOURNALCTL_ENV, str(stopping))
    monkeypatch.setenv(journal_native.STALL_ENV, "1.5")
    from forensics.case.build import read_bundle

    frames, manifest = read_bundle(tmp_path / "bundle")
    (entry,) = manifest["inputs"]
    assert "journalctl wrote nothing for 1.5 s after 0 bytes of export (FORENSICS_JOURNALCTL_STALL): stopped" \
        in entry["error"]
    assert frames["events"].height == 0 and entry["records"] == entry["parsed"] + entry["quarantined"]


def _objects(data: bytes) -> list[tuple[int, int, int]]:
    """(offset, type, size) of every object, walked from the header to the tail object."""
    at, tail = struct.unpack_from("<Q", data, 88)[0], struct.unpack_from("<Q", data, 136)[0]
    found = []
    while at <= tail:
        kind, size = data[at], struct.unpack_from("<Q", data, at + 8)[0]
        found.append((at, kind, size))
        at += (size + 7) & ~7
    return found


@pytest.mark.parametrize("layout", ["compact, zstd, keyed hash", "regular"])
def test_a_damaged_file_reads_as_journalctl_reads_it(journals: dict[str, Path], tmp_path: Path, layout: str) -> None:
    """Bytes changed at random (a fixed seed) in the headers of data, entry and entry-array objects
    and in the file's own header: what is read is exactly journalctl's export of the damaged file,
    whether this reader read it all or journalctl took over (or refused the file), and both happen."""
    base = journals[layout].read_bytes()
    structural = [o for o in _objects(base) if o[1] in (1, 3, 6)]  # data, entry, entry array
    structural += [(0, 0, 272)] * (len(structural) // 4)  # the file header, a fifth of the trials
    rng = random.Random(3)
    handed_on = read_here = 0
    for trial in range(150):
        data = bytearray(base)
        at, _, size = rng.choice(structural)
        for _ in range(rng.choice([1, 1, 2, 8])):
            data[at + rng.randrange(min(size, 80 if at else 272))] = rng.randrange(256)
        damaged = tmp_path / "damaged.journal"
        damaged.write_bytes(bytes(data))
        ours, taken_over = _read(damaged, damaged=True)
        assert ours == _journalctl(damaged), f"trial {trial}: {'object at ' + str(at) if at else 'file header'} changed"
        handed_on, read_here = handed_on + taken_over, read_here + (not taken_over)
    assert handed_on >= 20 and read_here >= 20


def test_without_journalctl_the_first_damage_is_named_and_the_entries_before_it_kept(
        journals: dict[str, Path], tmp_path: Path) -> None:
    base = journals["regular"].read_bytes()
    entry = [o for o in _objects(base) if o[1] == 3][50]  # the 51st entry: its realtime made 0
    data = bytearray(base)
    data[entry[0] + 24:entry[0] + 32] = bytes(8)
    damaged = tmp_path / "damaged.journal"
    damaged.write_bytes(bytes(data))
    with pytest.raises(ParseError, match=rf"sequence number or time systemd refuses at byte {entry[0]:,}; "
                                         "the 50 entries before it were read"):
        _read(damaged, program=None)
    written, *_, status, why, at = _journal_file.write_entries(damaged.read_bytes(), 0, 0, 0, 0, 0,
                                                               memoryview(bytearray(1 << 20)))
    assert status == _journal_file.STOP and at == entry[0]
    assert _journalctl(damaged)[:written].count(b"\n\n") == 50  # what journalctl printed before it


@pytest.mark.parametrize("data", [b"", b"LPKSHHRH", b"LPKSHHRH" + b"\xff" * 300, b"not a journal" * 40],
                         ids=["empty", "magic only", "header of 0xff", "text"])
def test_bytes_that_are_no_journal_stop_at_once(data: bytes) -> None:
    written, *_, status, why, at = _journal_file.write_entries(data, 0, 0, 0, 0, 0, memoryview(bytearray(4096)))
    assert (written, status) == (0, _journal_file.STOP) and why


def test_a_journal_folder_reads_the_same_with_or_without_this_reader(journals: dict[str, Path],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole path (events rows) from the file, then from the same file with every export written
    by journalctl: the same rows."""
    journal = journals["compact, zstd, keyed hash"]
    ours = journal_native.parse(journal)

    class JournalctlOnly(journal_native._FileExport):
        def __init__(self, program: str | None, path: Path) -> None:
            super().__init__(program, path)
            self._stopped = ("journalctl only", 0)

    monkeypatch.setattr(journal_native, "_FileExport", JournalctlOnly)
    theirs = journal_native.parse(journal)
    assert ours.records == theirs.records == 220
    assert ours.rows.equals(theirs.rows) and ours.quarantine.equals(theirs.quarantine)


def test_a_file_named_like_a_glob_pattern_is_read_alone(journals: dict[str, Path], tmp_path: Path) -> None:
    """journalctl expands `--file=sys*.journal`: beside `system.journal`, it would read both, and the
    bytes it takes over after would be counted in the other's entries too."""
    folder = tmp_path / "g"
    folder.mkdir()
    shutil.copy(journals["regular"], folder / "system.journal")
    data = bytearray(journals["compact, zstd, keyed hash"].read_bytes())
    entry = [o for o in _objects(bytes(data)) if o[1] == 3][30]
    data[entry[0] + 24:entry[0] + 32] = bytes(8)  # a realtime of 0: journalctl takes over there
    (folder / "sys*.journal").write_bytes(bytes(data))
    (tmp_path / "plain.journal").write_bytes(bytes(data))
    ours, handed_on = _read(folder / "sys*.journal", damaged=True)
    assert handed_on and ours == _journalctl(tmp_path / "plain.journal")
    assert journal_native.file_argument(folder / "a[1]{x}?.journal").endswith("/g/a\\[1\\]\\{x\\}\\?.journal")


def test_a_hand_over_that_does_not_continue_what_was_written_is_named(journals: dict[str, Path]) -> None:
    """journalctl's export must hold, just before it takes over, the bytes written before it."""
    journal = journals["regular"]
    text = _journalctl(journal)
    beyond = len(text) + 100  # more written before than journalctl's whole export
    short = f"ends at byte {len(text):,}, before the {beyond:,} bytes written from it before journalctl took over"
    for skip, tail, said in ((1200, text[1000:1200], None), (1200, b"x" * 200, "not what was written from it before"),
                             (beyond, text[-200:], short)):
        with journal_native._ExportOf("journalctl", journal, skip=skip, tail=tail) as rest:
            out, buffer = bytearray(), memoryview(bytearray(4096))
            while got := rest.readinto(buffer):
                out += buffer[:got]
            assert bytes(out) == text[skip:]
            if said:
                with pytest.raises(ParseError, match=re.escape(said)):
                    rest.raise_damage()
            else:
                rest.raise_damage()


SHRINK = """
import os, sys
from pathlib import Path
from forensics.errors import ParseError
from forensics.sources.journal import journal_native
path, program = Path(sys.argv[1]), sys.argv[2] or None
out, buffer = bytearray(), memoryview(bytearray(4096))
with journal_native._FileExport(program, path) as reader:
    out += buffer[:reader.readinto(buffer)]
    os.truncate(path, 4096)  # the header's page stays; every object past it is gone
    while got := reader.readinto(buffer):
        out += buffer[:got]
    try:
        reader.raise_damage()
    except ParseError as error:
        print(error)
sys.stdout.buffer.write(bytes(out))
"""


@pytest.mark.parametrize("program", ["journalctl", ""])
def test_a_file_that_shrinks_while_it_is_read_ends_its_reading_with_that_said(
        journals: dict[str, Path], tmp_path: Path, program: str) -> None:
    """Truncated by another program while mapped, a journal's next page would raise SIGBUS and end
    the process: the reading stops there instead, keeps the whole entries written before, and
    says the file shrank (journalctl is not asked to continue a file that is changing)."""
    journal = tmp_path / "shrinking.journal"
    shutil.copy(journals["regular"], journal)
    expected, size = _journalctl(journal), journal.stat().st_size
    done = subprocess.run([sys.executable, "-c", SHRINK, str(journal), program], capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    said, _, written = done.stdout.partition(b"\n")
    entries = written.count(b"\n__CURSOR=") + written.startswith(b"__CURSOR=")
    assert 0 < len(written) <= 4096 and expected.startswith(written) and written.endswith(b"\n\n")
    assert said.decode() == (f"{journal}: the file shrank while it was read: it was {size:,} bytes, it is 4,096 now, "
                             "and whatever was read of it from byte 4,096 on read as zeros; "
                             f"the {entries} entries read before that were kept")


def test_with_neither_journalctl_nor_python_systemd_this_reader_reads_alone(
        journals: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine without systemd (a container, a laptop): healthy files read as with journalctl, a
    damaged one up to its damage, which is named, and a file with no journal in it refused."""
    journal = journals["compact, zstd, keyed hash"]
    with_systemd = journal_native.parse(journal)
    monkeypatch.setattr(journal_native, "journalctl", lambda: None)
    monkeypatch.setattr(journal_native, "_python_systemd", lambda: False)
    alone = journal_native.parse(journal)
    assert alone.records == with_systemd.records == 220 and alone.rows.equals(with_systemd.rows)
    data = bytearray(journal.read_bytes())
    entry = [o for o in _objects(bytes(data)) if o[1] == 3][50]
    data[entry[0] + 24:entry[0] + 32] = bytes(8)
    damaged = tmp_path / "damaged.journal"
    damaged.write_bytes(bytes(data))
    read = journal_native.parse(damaged)
    assert read.rows.height == 50 and read.damage is not None
    assert f"sequence number or time systemd refuses at byte {entry[0]:,}; the 50 entries before it were read" \
        in read.damage
    broken = tmp_path / "broken.journal"
    broken.write_bytes(b"LPKSHHRH" + b"\0" * 100)
    with pytest.raises(ParseError, match="systemd cannot open it as a journal: no journal header"):
        journal_native.parse(broken)


FOREIGN_FAULT = """
import faulthandler, mmap, os, sys
from pathlib import Path
faulthandler.enable()
from forensics.sources.journal import journal_native
path, other = Path(sys.argv[1]), Path(sys.argv[2])
with journal_native._FileExport(None, path) as reader:  # the guard installed, and released after
    reader.readinto(memoryview(bytearray(4096)))
other.write_bytes(b"x" * path.stat().st_size)  # the same size: often mapped where the journal was
with open(other, "rb") as f:
    mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
os.truncate(other, 0)
print("read past the end:", mapped[len(mapped) - 1])
"""


def test_a_fault_in_memory_no_journal_reading_guards_is_left_to_the_handler_before(
        journals: dict[str, Path], tmp_path: Path) -> None:
    """The guard takes only faults in the files it guards, while they are mapped (a guard that
    outlived the journal's map took a later map at its address for it): any other SIGBUS reaches
    what handled it before (here Python's faulthandler, which names it; then the process ends by it)."""
    done = subprocess.run([sys.executable, "-c", FOREIGN_FAULT, str(journals["regular"]), str(tmp_path / "other")],
                          capture_output=True, text=True)
    assert done.returncode == -7 and "read past the end" not in done.stdout
    assert "Fatal Python error: Bus error" in done.stderr
