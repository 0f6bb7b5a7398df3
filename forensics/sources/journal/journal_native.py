"""Native journal files (`*.journal`, rotated `*.journal~`) and whole journal directories.

Each file is written out as its journal export, the text `journalctl --file FILE -o export` prints,
and that text streamed into the export reader's C scanner
(`forensics.sources.journal.journal_export.stream_pieces`). The export is written by
`_journal_file` from the file's own bytes, byte for byte journalctl's (`tests/sources/
test_journal_file.py` compares them) at a small part of its cost; at the first thing in a file that
is not ordinary (damage, xz or lz4 compression, a flag it does not know) systemd's own journalctl
takes over where it stopped, so damage is judged by systemd. A folder's files are read
apart, up to one per core, and their parts come file after file in the order of their first entries.
Where there is no journalctl, python-systemd's `systemd.journal._Reader` reads them (the raw
interface: field values as bytes, repeated fields as lists); `tests/sources/test_journal_conformance.py`
shows the two agree. Where there is neither (a container, a laptop), `_journal_file` reads alone:
healthy files whole, a damaged file up to its first damage, which is named. The on-disk format is https://systemd.io/JOURNAL_FILE_FORMAT/; journal files
start with the magic "LPKSHHRH".
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import queue
import re
import select
import shutil
import subprocess
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import polars as pl

from forensics.errors import MissingSystemDependency, ParseError
from forensics.sources.journal.fields import FieldFrameBuilder, JournalValue, assemble_events
from forensics.sources.common import mapguard
from forensics.sources.common.rawio import pieces_from
from forensics.sources import ParseResult, combine, register
from forensics.sources.journal import _journal_file
from forensics.sources.journal.journal_export import CHUNK_BYTES, SLACK, stream_pieces

NAME = "journal_native"
CANNOT_OPEN = "systemd cannot open it as a journal"  # how a file systemd refuses whole is named, by either reader
MAGIC = b"LPKSHHRH"
SUFFIXES = (".journal", ".journal~")


def sniff(head: bytes, path: Path) -> bool:
    """A journal file by its magic, or a directory of journal files (like /var/log/journal, with its
    machine-id folders) holding no other files: a folder that also holds exports or JSON is not
    one journal, its parts are read each by its own format."""
    if path.is_dir():
        files = [p for p in path.rglob("*") if p.is_file()]
        return bool(files) and all(p.name.endswith(SUFFIXES) for p in files)
    return head.startswith(MAGIC)


def journal_files(path: Path) -> list[Path]:
    """The journal files `path` names: itself, or every one under the folder at any depth. systemd's
    own directory reading takes only files in the folder and in machine-id named folders below it,
    so a bundle's `journal/<host>/x.journal` would be read as nothing; each file is named instead."""
    if not path.is_dir():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(SUFFIXES))


def _reader(path: Path):
    try:
        from systemd import journal
    except ImportError as error:
        raise MissingSystemDependency(
            f"{path}: reading .journal files needs the 'journal' extra: pip install 'forensics[journal]' "
            f"(it builds python-systemd, which needs Debian's libsystemd-dev and pkg-config)") from error
    try:
        return journal._Reader(flags=0, files=[str(p) for p in journal_files(path)])
    except (OSError, ValueError) as error:
        raise ParseError(str(path), f"{CANNOT_OPEN}: {error}") from error


JOURNALCTL_ENV = "FORENSICS_JOURNALCTL"  # another journalctl, or "" for python-systemd's reader
# The longest journalctl may go without a word (its export of a file, its check of a header): a
# journalctl that hangs on a file ends that file's reading with this said, not the whole ingest.
STALL_ENV = "FORENSICS_JOURNALCTL_STALL"
STALL_S = 120.0


def stall_seconds() -> float:
    """How long journalctl may go without writing (`FORENSICS_JOURNALCTL_STALL`, seconds)."""
    try:
        return max(0.1, float(os.environ.get(STALL_ENV) or STALL_S))
    except ValueError:
        return STALL_S


def journalctl() -> str | None:
    """The journalctl to read journals with (`FORENSICS_JOURNALCTL`, else the one on PATH)."""
    chosen = os.environ.get(JOURNALCTL_ENV)
    return (chosen or None) if chosen is not None else shutil.which("journalctl")


class _ExportOf:
    """`journalctl -o export` of a journal file or folder as a reader (`readinto`), its first
    `skip` bytes passed over; after the last byte, `raise_damage` says why journalctl stopped if it
    failed (its own words)."""

    def __init__(self, program: str, path: Path, skip: int = 0, tail: bytes = b"") -> None:
        self.path, self._skip, self._tail = path, skip, tail
        self._skipped_tail = b""  # the last bytes passed over, to be `tail`: the bytes written before
        self.differs = False
        files = [file_argument(p) for p in journal_files(path)]
        # unbuffered: a read takes what the pipe holds, so that a wait for more can be bounded
        self._child = subprocess.Popen([program, *files, "-o", "export", "--no-pager", "-q"], bufsize=0,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       env={**os.environ, "SYSTEMD_COLORS": "0", "SYSTEMD_PAGER": ""})
        self._stall = stall_seconds()
        self._said: list[bytes] = []
        # read its complaints as they come, so that a full stderr pipe never stalls it
        self._listener = threading.Thread(target=lambda: self._said.append(self._child.stderr.read()), daemon=True)
        self._listener.start()
        self.done = 0

    def _output(self, view: memoryview) -> int:
        """journalctl's next bytes into `view` (0 at its end); a ParseError when it writes nothing
        for the stall bound (it is stopped: the entries before were read)."""
        if not select.select([self._child.stdout], [], [], self._stall)[0]:
            self._child.kill()
            raise ParseError(str(self.path), f"journalctl wrote nothing for {self._stall:g} s after {self.done:,} "
                                             f"bytes of export ({STALL_ENV}): stopped; the entries before were read")
        return self._child.stdout.readinto(view) or 0

    def readinto(self, view: memoryview) -> int:
        while self._skip:
            passed = self._output(view[:self._skip])
            if not passed:  # it wrote less than was written before it took over
                self.differs = bool(self._tail)
                return 0
            self._skip -= passed
            self.done += passed
            if self._tail:
                kept = len(self._tail)
                self._skipped_tail = (self._skipped_tail + bytes(view[max(0, passed - kept):passed]))[-kept:]
                self.differs = not self._skip and self._skipped_tail != self._tail
        got = self._output(view)
        self.done += got
        return got

    def raise_damage(self) -> None:
        code = self._child.wait()
        self._listener.join()
        if self.differs and self._skip:
            raise ParseError(str(self.path), f"journalctl's export of the file ends at byte {self.done:,}, before the "
                                             f"{self.done + self._skip:,} bytes written from it before journalctl took "
                                             "over: entries there may be missing")
        if self.differs:
            raise ParseError(str(self.path), f"journalctl's export of the file up to byte {self.done:,} is "
                                             "not what was written from it before journalctl took over: entries "
                                             "there may be missing or doubled")
        if code == 0:
            return
        said = b"".join(self._said).decode(errors="replace").strip().splitlines()
        why = said[-1] if said else f"exit status {code}"
        if self.done == 0:
            raise ParseError(str(self.path), f"{CANNOT_OPEN}: {why}")
        raise ParseError(str(self.path), f"journalctl stopped after {self.done:,} bytes of export: {why}; "
                                         "the entries before it were read")

    def __enter__(self) -> "_ExportOf":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._child.poll() is None:  # the reader stopped early: journalctl need not go on
            self._child.kill()
        self._child.wait()
        self._child.stdout.close()
        self._listener.join()
        self._child.stderr.close()


class _FileExport:
    """A journal file's export as a reader (`readinto`), written by `_journal_file` from the
    file's bytes; from the first thing not ordinary on, journalctl's (`program`) export of the
    rest. A file whose header systemd refuses is journalctl's whole (it says why it cannot open
    it). Without journalctl, the first thing not ordinary is the file's damage."""

    def __init__(self, program: str | None, path: Path) -> None:
        self.path, self._program, self.done = path, program, 0
        self._data: bytes | mmap.mmap = b""
        # entry array, item in it, entries written, the last one's offset and sequence number
        self._place: tuple[int, ...] = (0, 0, 0, 0, 0)
        self._left = memoryview(b"")  # the rest of an entry longer than a read
        self._tail = b""  # the last bytes handed on, which journalctl's export must hold where it takes over
        self._rest: _ExportOf | None = None
        self._stopped: tuple[str, int] | None = None
        self._ended = False
        self.damage: str | None = None
        self._shrunk: mapguard.Shrunk | None = None  # the file, found shrunk under the reading
        if program is not None and not _systemd_opens(program, path):
            self._stopped = (CANNOT_OPEN, 0)
            return
        try:  # a file that cannot be mapped reads as no header: journalctl says why it cannot open it
            with path.open("rb") as f:
                self._data = mapguard.GuardedMap(f.fileno(), 0, access=mmap.ACCESS_READ)
            self._data.guard(path)
        except (OSError, ValueError):
            pass

    def readinto(self, view: memoryview) -> int:
        got = self._read(view)
        self.done += got
        if self._rest is None:
            self._tail = (self._tail + bytes(view[max(0, got - TAIL_CHECKED):got]))[-TAIL_CHECKED:]
        return got

    def _read(self, view: memoryview) -> int:
        if self._left:
            take = min(len(self._left), len(view))
            view[:take], self._left = self._left[:take], self._left[take:]
            return take
        if self._rest is not None:
            return self._rest.readinto(view)
        if self._stopped is not None:
            self._hand_on()
            return self._read(view)
        if self._ended:
            return 0
        written, status = self._write(view)
        if status == _journal_file.TOO_BIG:  # one entry longer than the read: written aside, handed on in reads
            aside = bytearray(written)
            written, status = self._write(memoryview(aside))
            self._left = memoryview(aside)[:written]
            return self._read(view)
        if status == _journal_file.END:
            self._ended = True
        return written if written or status != _journal_file.STOP else self._read(view)

    def _write(self, view: memoryview) -> tuple[int, int]:
        """Entries into `view`: bytes written (or needed, for TOO_BIG) and how it ended."""
        written, *place, status, why, at = _journal_file.write_entries(self._data, *self._place, view)
        if isinstance(self._data, mapguard.GuardedMap) and (shrunk := self._data.shrunk()) is not None:
            # the file shrank under this call: what it wrote may hold zeros read in place of the
            # file's bytes, so none of it is kept, and the reading stops where it began
            self._shrunk, self._stopped = shrunk, (mapguard.SHRANK, shrunk.at)
            return 0, _journal_file.STOP
        self._place = tuple(place)
        if status == _journal_file.STOP:
            self._stopped = (why, at)
        return (at if status == _journal_file.TOO_BIG else written), status

    def _hand_on(self) -> None:
        """journalctl reads on from the first byte not written here, or the reading ends with its damage."""
        why, at = self._stopped or ("", 0)
        # a file that shrank under the reading is changing: journalctl's reading of it from the
        # start could not continue this one, so what was read stands and the shrinking is said
        if self._program is not None and self._shrunk is None:
            # From the start: its seeking by cursor in a damaged file can miss what its reading
            # from the start finds, and what is written here is what it writes up to that point.
            self._rest = _ExportOf(self._program, self.path, skip=self.done, tail=self._tail)
            return
        self._ended = True
        self._stopped = None
        written = self._place[2]
        # nothing read at all is a file that cannot be opened, in the words journalctl's refusal has
        if self._shrunk is not None:
            self.damage = f"{self._shrunk.said()}; the {written:,} entries read before that were kept"
            return
        self.damage = (f"{CANNOT_OPEN}: {why} at byte {at:,}" if not written
                       else f"{why} at byte {at:,}; the {written:,} entries before it were read")

    def raise_damage(self) -> None:
        if self._rest is not None:
            self._rest.raise_damage()
        elif self.damage is not None:
            raise ParseError(str(self.path), self.damage)

    def __enter__(self) -> "_FileExport":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._rest is not None:
            self._rest.__exit__(*exc)
        if isinstance(self._data, mmap.mmap):
            self._data.close()


# The bytes before journalctl takes over compared with its own export of them: where they differ,
# the two readings parted earlier and the hand-over would double or drop entries.
TAIL_CHECKED = 4096


def file_argument(path: Path) -> str:
    """journalctl's `--file=` for `path` exactly: journalctl expands glob patterns in it, so a file
    named `sys*.journal` would also read `system.journal`; backslashes quote the pattern characters."""
    return "--file=" + re.sub(r"([\\*?\[\]{}])", r"\\\1", str(path))


def _systemd_opens(program: str, path: Path) -> bool:
    """Whether systemd opens the journal file (`journalctl --header`, ~10 ms): the checks of its
    header (state, sizes, the tables' places) are systemd's, and a file it refuses is refused whole
    by journalctl however sound its entries."""
    try:
        shown = subprocess.run([program, file_argument(path), "--header", "--no-pager", "-q"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=stall_seconds(),
                               env={**os.environ, "SYSTEMD_COLORS": "0", "SYSTEMD_PAGER": ""}, check=False)
    except subprocess.TimeoutExpired as error:
        raise ParseError(str(path), f"journalctl --header gave no answer within {error.timeout:g} s "
                                    f"({STALL_ENV}): not read") from error
    return shown.returncode == 0


# A folder's files read this many at once, each on a thread of its own: writing a file's export
# runs on one core (and journalctl, where it takes over, merges files at a higher cost than it
# reads them apart: the 1 M reference's three files, 9.8 s merged, 5.7 s apart). At most four:
# each file read also brings its own scanning threads.
FILES_AT_ONCE = max(1, min(4, len(os.sched_getaffinity(0))))
# Parts of a file read ahead of the one being handed on, at most (each ~16 MB of export text):
# enough to keep a rotated file's export being written (journald's files are 128 MiB at most), a
# bound on what waits in memory.
PARTS_AHEAD = 32
# The journal file header's head_entry_realtime: a little-endian uint64 at this offset
# (https://systemd.io/JOURNAL_FILE_FORMAT/, `struct Header`).
HEAD_REALTIME_AT = 184


def head_realtime(path: Path) -> int | None:
    """The realtime (µs) of a journal file's first entry, from its header; None when the header is
    cut short or the file has no entries."""
    try:
        with path.open("rb") as f:
            header = f.read(HEAD_REALTIME_AT + 8)
    except OSError:
        return None
    if len(header) < HEAD_REALTIME_AT + 8 or not header.startswith(MAGIC):
        return None
    return struct.unpack_from("<Q", header, HEAD_REALTIME_AT)[0] or None


def stream(path: Path) -> Iterator[ParseResult]:
    """A journal file's or folder's `events` and `quarantine` rows, a part per piece of its export
    (`_FileExport`); python-systemd's reader when there is no journalctl (or it is asked for), and
    where there is neither, `_FileExport` alone: healthy files are read whole, and a file's first
    damage is named with the entries before it kept.

    A folder's files are read apart (`FILES_AT_ONCE` at a time), file after file by their first
    entries' time, and numbered as one text: a row's line and byte are those of the exports of the
    files so ordered, put end to end. A file systemd cannot open is the input's damage, named, and
    the others are read (one journalctl given them all would refuse every one); a folder none of
    whose files opens is refused."""
    program = journalctl()
    if program is None and (os.environ.get(JOURNALCTL_ENV) == "" or _python_systemd()):
        yield parse_entries(path)
        return
    files = journal_files(path)
    if len(files) == 1:
        yield from _stream_file(program, files[0], str(path), refuse=True)
        return
    firsts = {f: head_realtime(f) for f in files}  # a file without a readable header last, by name
    files.sort(key=lambda f: (firsts[f] is None, firsts[f] or 0, str(f)))
    lines = size = 0
    refused = []
    parts = streams_in_turn([lambda f=f: _stream_file(program, f, str(path), refuse=False) for f in files],
                            FILES_AT_ONCE)
    for part in parts:
        if part.damage and f": {CANNOT_OPEN}" in part.damage and not part.records:
            refused.append(part.damage)
        yield _continued(part, lines, size)
        if part.text_read is not None:  # a file's last part: the next file's numbering goes on from here
            lines, size = lines + part.text_read[0], size + part.text_read[1]
    if len(refused) == len(files):
        raise ParseError(str(path), "systemd cannot open any of its journal files: " + "; ".join(refused))


def _continued(part: ParseResult, lines: int, size: int) -> ParseResult:
    """`part`'s lines and bytes counted after `lines` lines and `size` bytes of text before it."""
    if not lines and not size:
        return part
    rows = part.rows.with_columns(pl.col("source_line") + lines, pl.col("source_offset") + size) \
        if part.rows.height else part.rows
    quarantine = part.quarantine
    if quarantine.height:
        said = pl.col("reason").str.extract(r"^line ([0-9]+): ", 1).cast(pl.Int64)
        quarantine = quarantine.with_columns(
            pl.col("line") + lines, pl.col("offset") + size,
            pl.when(said.is_not_null()).then(pl.format("line {}: {}", said + lines,
                                                       pl.col("reason").str.replace(r"^line [0-9]+: ", "")))
            .otherwise(pl.col("reason")).alias("reason"))
    return dataclasses.replace(part, rows=rows, quarantine=quarantine)


def _python_systemd() -> bool:
    """Whether python-systemd's journal reader can be imported (the `journal` extra)."""
    try:
        from systemd import journal  # noqa: F401
    except ImportError:
        return False
    return True


def _stream_file(program: str | None, file: Path, source_file: str, refuse: bool) -> Iterator[ParseResult]:
    """One journal file's parts (`_FileExport`), labelled with the input's `source_file`. A file
    systemd cannot open at all is refused (`refuse`: a ParseError) or is the part's damage."""
    opened = lambda: _FileExport(program, file)  # noqa: E731 - the reader opened in the reading thread
    for part in stream_pieces(pieces_from(opened, f"export {file.name}", CHUNK_BYTES, b"\n\n", SLACK),
                              source_file, NAME):
        if refuse and part.damage and part.damage.startswith(f"{file}: {CANNOT_OPEN}"):
            raise ParseError(str(file), part.damage[len(f"{file}: "):])  # a journal it could not open at all
        yield part


def streams_in_turn(streams: list[Callable[[], Iterator[ParseResult]]], at_once: int,
                    ahead: int = PARTS_AHEAD) -> Iterator[ParseResult]:
    """The parts of `streams`, stream after stream in the order given, read `at_once` at a time on
    threads of their own: a stream starts when the one `at_once` before it has been handed on, and
    runs at most `ahead` parts ahead of it. A stream's error is raised where its parts would have
    come; stopping early stops the rest (their threads never keep the interpreter from exiting)."""
    finished = object()
    stop = threading.Event()
    waiting: list[queue.Queue] = [queue.Queue(maxsize=ahead) for _ in streams]

    def hand(index: int, item: object) -> bool:
        while not stop.is_set():
            try:
                waiting[index].put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce(index: int) -> None:
        try:
            for part in streams[index]():
                if not hand(index, part):
                    return
        except BaseException as error:  # noqa: BLE001 - handed to the consumer, raised there
            hand(index, error)
            return
        hand(index, finished)

    def start(index: int) -> None:
        threading.Thread(target=produce, args=(index,), name=f"forensics-journal-{index}", daemon=True).start()

    for index in range(min(at_once, len(streams))):
        start(index)
    try:
        for index, parts in enumerate(waiting):
            while (item := parts.get()) is not finished:
                if isinstance(item, BaseException):
                    raise item
                yield item
            if index + at_once < len(streams):
                start(index + at_once)
    finally:
        stop.set()


def parse(path: Path) -> ParseResult:
    """Read every entry of a journal file or directory into `events` and `quarantine` rows."""
    return combine(list(stream(path)))


def parse_entries(path: Path) -> ParseResult:
    """Read every entry of a journal file or directory with python-systemd, entry by entry."""
    builder = FieldFrameBuilder()
    read = 0
    with _reader(path) as reader:
        while True:
            try:
                if not reader._next():
                    break
            except OSError as error:  # a corrupt region: systemd cannot step past it
                builder.add({}, problem=f"entry after #{read}: systemd stopped reading: {error}")
                break
            record: dict[str, list[JournalValue]] = {}
            for name, value in reader._get_all().items():
                record[name] = list(value) if isinstance(value, list) else [value]
            monotonic, boot_id = reader._get_monotonic()
            record["__CURSOR"] = [reader._get_cursor()]
            record["__REALTIME_TIMESTAMP"] = [str(reader._get_realtime())]
            record["__MONOTONIC_TIMESTAMP"] = [str(monotonic)]
            record.setdefault("_BOOT_ID", [boot_id.hex()])
            builder.add(record, excerpt=record.get("MESSAGE", [None])[0])
            read += 1
    fields = builder.build()
    events, quarantine = assemble_events(fields, source_file=str(path), fmt=NAME)
    return ParseResult("events", events, quarantine, records=fields.height)


register(NAME, sniff, parse, module=__name__, stream=stream)
