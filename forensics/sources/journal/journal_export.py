"""Journal Export Format (`journalctl -o export`), plain or gzip/zstd/xz-compressed.

Spec: https://systemd.io/JOURNAL_EXPORT_FORMATS/ — entries are runs of `KEY=value` lines ended by
a blank line; a value that is not printable UTF-8 is written as `KEY\\n`, a 64-bit little-endian
length, the bytes, and `\\n`. Fields may repeat. Several hosts' exports may be concatenated.

The hot loop is C (`_export_scan.c`): one pass over a piece finds lines, fields, binary values
and entries, and each field's values become one Arrow column (copied out dense, or views into a
memory-mapped file: see DENSE_FIELDS); the identifiers the case holds as categories
(`fields.CATEGORY_FIELDS`) come as codes into each piece's distinct values, which polars takes as a
category. The file is read in pieces of about 16 MB cut at entry boundaries, parsed and assembled
two at a time while the next piece is decompressed (`forensics.sources.common.rawio.pieces`).
"""

from __future__ import annotations

import dataclasses
import os
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa

from forensics.sources.common.byteviews import SLACK, binary_views, dense_binary
from forensics.sources.common.frames import arrow_series
from forensics.errors import ParseError
from forensics.sources.journal.cursor import OWN, PARSED
from forensics.sources.journal.fields import (CATEGORY_FIELDS, FIELD_NAME, MAX_NAMES, SCANNED_INTEGERS, assemble_events,
                                              field_name_problem)
from forensics.sources.common.rawio import Piece, pieces
from forensics.sources.common.schema import EVENTS_SCHEMA, EXCERPT_CHARS, QUARANTINE_SCHEMA, RAW_FIELD, empty
from forensics.sources import ParseResult, combine, register
from forensics.sources.journal import _export_scan

NAME = "journal_export"
# Pieces of this size: each costs some milliseconds of Python and polars set-up (at 1 M entries
# 8 MB pieces made the analysis 0.1 s slower than 16 MB; 32 MB gained nothing more).
CHUNK_BYTES = 16 << 20
# Fields copied out dense even from a memory-mapped file (elsewhere values are views into the
# file's pages): every detector searches messages, and a regex over values scattered through the
# file runs several times slower than over the same values end to end (`byteviews.dense_binary`).
# Decompressed pieces have every value copied out, so that their memory carries the next piece.
DENSE_FIELDS = {"MESSAGE"}


def sniff(head: bytes, path: Path) -> bool:
    """An export starts with a `KEY=value` line or a binary field header, both with a valid name."""
    if path.is_dir():
        return False
    first, newline, _ = head.partition(b"\n")
    if not newline and len(head) < 4096:
        return False
    key, eq, _ = first.partition(b"=")
    return FIELD_NAME.fullmatch(key) is not None and (bool(eq) or len(head) > len(first) + 9)


class _Overrun(Exception):
    """A binary value runs past the chunk, or the chunk's last blank line lies inside one: the
    chunk must be parsed together with the next."""


_LINE_PROBLEMS = {  # the kinds `_export_scan.scan` reports, worded
    0: lambda name, size, left: f"no '=' and {field_name_problem(name)}",
    1: lambda name, size, left: f"binary field {name.decode()}: length cut off by end of file",
    2: lambda name, size, left: f"binary field {name.decode()}: length {size} runs past end of file ({left} bytes left)",
    3: lambda name, size, left: f"binary field {name.decode()}: {size}-byte value not followed by a newline",
    4: lambda name, size, left: (f"more than {MAX_FIELDS} fields: journald writes no such entry (forged or "
                                 "damaged); its fields past that are not kept"),
    5: lambda name, size, left: (f"field {name[:64].decode('ascii', 'backslashreplace')} past the {MAX_NAMES:,} "
                                 "distinct field names a piece of an export may hold: journald and the programs it "
                                 "logs for write some hundreds (forged or damaged)"),
}
MAX_FIELDS = 1024  # as _export_scan.c: journald's ENTRY_FIELD_COUNT_MAX
_DENSE_NAMES = frozenset(name.encode() for name in DENSE_FIELDS)
# Identifiers the case holds as categories, coded by the scanner as it meets them (`_coded_column`).
_CODED_NAMES = frozenset(name.encode() for name in CATEGORY_FIELDS)
# Integers the case holds as numbers only (not their text), read by the scanner where plainly written.
_INTEGER_NAMES = frozenset(name.encode() for name in SCANNED_INTEGERS)


def _int64(raw: bytes) -> np.ndarray:
    return np.frombuffer(raw, dtype=np.int64)


def _first_problems(readable: np.ndarray, m: int, at_eof: bool, scanned: tuple
                    ) -> tuple[dict[int, tuple[int, str]], bool]:
    """Each damaged entry's first problem (its line and the reason, worded) of a piece
    `_export_scan.scan` read, and whether its last entry ends the file after a whole field line
    without its blank line (read, and noted)."""
    n_entries, _, entry_line, _, keys, line_problems, bad_keys, closed = scanned
    # An entry's first problem (by line) is the one reported.
    problems = sorted([(entry, line, _LINE_PROBLEMS[kind](name, size, left))
                       for kind, entry, line, name, size, left in line_problems]
                      + [(entry, line, field_name_problem(keys[code][0]) or "") for code, entry, line in bad_keys])
    first_problem: dict[int, tuple[int, str]] = {}
    for entry, line, why in problems:
        first_problem.setdefault(entry, (line, why))
    for kind, entry, line, _, _, left in line_problems:
        if kind == 2 and first_problem.get(entry, (None,))[0] == line:
            # a length past the end swallows what follows: say how many entries its bytes seem to hold
            rest = bytes(readable[max(0, m - left):m])
            # what follows the bad entry's own end, cut at blank lines: each non-empty part an entry
            swallowed = sum(1 for part in rest.split(b"\n\n")[1:] if part.strip(b"\n"))
            if swallowed:
                first_problem[entry] = (line, first_problem[entry][1] + f"; those bytes hold about {swallowed} more "
                                        f"entr{'ies' if swallowed > 1 else 'y'} by their blank lines, not read")
    # The last entry may end at the end of the file without its blank line. Cut in the middle of
    # a line it is damage; after a whole field line it is read (VictoriaLogs reads it; systemd-
    # journal-remote drops it as "premature EOF") and the input's notes say so.
    unclosed = at_eof and n_entries and not closed and n_entries - 1 not in first_problem
    if unclosed and (m == 0 or readable[m - 1] != ord("\n")):
        first_problem[n_entries - 1] = (int(_int64(entry_line)[-1]),
                                        "entry at end of file is not closed by a blank line (file truncated?)")
        unclosed = False
    return first_problem, bool(unclosed)


def _parse_chunk(readable: np.ndarray, m: int, at_eof: bool, byte_base: int, line_base: int,
                 copy: bool = True) -> pl.DataFrame:
    """Parse one chunk (whole entries, the first `m` bytes of `readable`, found at `byte_base` in
    the file, after `line_base` lines) into a field frame (see `forensics.sources.journal.fields`); with `copy`,
    every value is copied out of `readable`, so that its memory can be used again."""
    scanned = _export_scan.scan(readable, m, at_eof, copy, _DENSE_NAMES, _CODED_NAMES, b"__CURSOR", _INTEGER_NAMES,
                                EXCERPT_CHARS)
    if scanned is None:
        raise _Overrun
    n_entries, entry_start, entry_line, excerpt_views, keys, line_problems, bad_keys, closed = scanned
    entry_start, entry_line = _int64(entry_start), _int64(entry_line)
    piece = pa.py_buffer(readable)

    first_problem, unclosed = _first_problems(readable, m, at_eof, scanned)

    columns: dict[str, pl.Series] = {}
    raw_items: list[tuple[np.ndarray, str, pl.Series]] = []
    for name_bytes, valid, utf8, views, validity, dense, later, codes, held in keys:
        if not valid:
            continue
        name = name_bytes.decode("ascii")
        if held is not None and name_bytes in _INTEGER_NAMES:  # the plain numbers; the text holds the rest
            numbers, parsed = held
            columns[f"@int {name}"] = arrow_series(pa.Array.from_buffers(
                pa.int64(), n_entries, [pa.py_buffer(parsed), pa.py_buffer(numbers)]), f"@int {name}")
        elif held is not None:
            columns.update(_cursor_values(held, n_entries))
        kind = pa.string_view() if utf8 else pa.binary_view()
        present = None if validity is None else pa.py_buffer(validity)
        if views is None:  # every value held as values or numbers: no text
            columns[name] = pl.repeat(None, n_entries, dtype=pl.String, eager=True).alias(name)
        elif codes is not None:
            columns[name] = _coded_column(name, kind, views, dense, codes, present, n_entries)
        else:
            data = piece if dense is None else pa.py_buffer(dense)
            columns[name] = arrow_series(pa.Array.from_buffers(kind, n_entries, [present, pa.py_buffer(views), data]), name)
        if later is not None:
            rows, starts, ends = map(_int64, later)
            values = binary_views if dense is None else dense_binary
            raw_items.append((rows, name, values(readable, starts, ends)))

    located: list[str | None] = [None] * n_entries if first_problem else []
    for entry, (line, why) in first_problem.items():
        located[entry] = f"line {line + 1 + line_base}: {why}"
    excerpts = pa.Array.from_buffers(pa.binary_view(), n_entries, [None, pa.py_buffer(excerpt_views), piece])
    frame = pl.DataFrame(columns, height=n_entries) if columns else pl.DataFrame(height=n_entries)
    frame = frame.with_columns(
        pl.Series("@offset", entry_start + byte_base, dtype=pl.Int64),
        pl.Series("@line", entry_line + 1 + line_base, dtype=pl.Int64),
        pl.Series("@problem", located, dtype=pl.String) if located else pl.lit(None, pl.String).alias("@problem"),
        arrow_series(excerpts, "@excerpt"),
    )
    if unclosed:
        frame = frame.with_columns((pl.int_range(pl.len()) == n_entries - 1).alias("@unclosed"))
    if raw_items:
        raw = pl.concat([
            pl.DataFrame({"row": rows, "name": [name] * len(rows), "value": vals})
            for rows, name, vals in raw_items
        ]).sort("row", maintain_order=True).group_by("row", maintain_order=True).agg(
            pl.struct("name", "value").cast(RAW_FIELD).alias("@raw"))
        frame = (frame.with_row_index("@row").join(raw.rename({"row": "@row"}).with_columns(pl.col("@row").cast(pl.UInt32)),
                                                   on="@row", how="left").drop("@row"))
    return frame


def _coded_column(name: str, kind: pa.DataType, values: object, data: object, codes: object,
                  present: pa.Buffer | None, n_entries: int) -> pl.Series:
    """A coded key's column (`_export_scan`: each entry's code into its distinct values): a
    category when every value is UTF-8 (polars maps the few values, not every row), else the
    values themselves, as Binary, for `assemble_events` to decode."""
    dictionary = pa.Array.from_buffers(kind, len(memoryview(values)) // 16, [None, pa.py_buffer(values),
                                                                              pa.py_buffer(data)])
    indices = pa.Array.from_buffers(pa.uint32(), n_entries, [present, pa.py_buffer(codes)])
    if kind == pa.string_view():
        return arrow_series(pa.DictionaryArray.from_arrays(indices, dictionary), name)
    return arrow_series(dictionary, name).gather(arrow_series(indices))  # a null code gives a null


def _cursor_values(cursor: tuple, n_entries: int) -> dict[str, pl.Series]:
    """The scanner's parsed cursors (`_export_scan.scan`'s `cursor`) as a field frame's
    `forensics.sources.journal.cursor.PARSED` columns."""
    id_views, id_data, *codes_and_numbers, parsed, own = cursor
    ids = pa.Array.from_buffers(pa.string_view(), len(memoryview(id_views)) // 16,
                                [None, pa.py_buffer(id_views), pa.py_buffer(id_data)])
    present = pa.py_buffer(parsed)
    values = [arrow_series(pa.DictionaryArray.from_arrays(
        pa.Array.from_buffers(pa.uint32(), n_entries, [present, pa.py_buffer(codes)]), ids))
        for codes in codes_and_numbers[:2]]
    values += [arrow_series(pa.Array.from_buffers(pa.uint64(), n_entries, [present, pa.py_buffer(numbers)]))
               for numbers in codes_and_numbers[2:]]
    s, b, i, m, t, x = values
    held = arrow_series(pa.Array.from_buffers(pa.bool_(), n_entries, [None, pa.py_buffer(own)]), OWN)
    return {OWN: held, **{name: value.alias(name) for name, value in zip(PARSED, (s, i, b, m, t, x))}}


def _read_piece(piece: Piece, line_base: int, source_file: str, fmt: str = NAME
                ) -> tuple[pl.DataFrame, pl.DataFrame, int, bool] | _Overrun:
    """One piece's `events` and `quarantine` rows, its record count, and whether its last entry
    ended the file without a blank line."""
    try:
        fields = _parse_chunk(piece.data, piece.length, piece.at_eof, piece.offset, line_base, piece.reusable)
    except _Overrun as overrun:
        return overrun
    events, quarantine = assemble_events(fields, source_file=source_file, fmt=fmt)
    return events, quarantine, fields.height, "@unclosed" in fields.columns


IN_FLIGHT = 4  # pieces parsed or waiting for a worker: enough to keep two busy


def _finish(waiting: deque[tuple[Piece, int, Future]], source_file: str, fmt: str
            ) -> tuple[pl.DataFrame, pl.DataFrame, int, bool]:
    """The oldest waiting piece's rows; its memory goes back for later pieces."""
    piece, line_base, job = waiting.popleft()
    result = job.result()
    while isinstance(result, _Overrun):  # a binary value crosses the cut: parse it with the next piece
        if not waiting:  # there is none (the input broke off after this one): this piece ends the file
            result = _read_piece(dataclasses.replace(piece, at_eof=True), line_base, source_file, fmt)
            break
        after, _, its_job = waiting.popleft()
        its_job.result()  # that piece was parsed on its own as well: wait for it, then drop that
        joined = piece.joined(after, SLACK)
        piece.release()
        after.release()
        piece, result = joined, _read_piece(joined, line_base, source_file, fmt)
    piece.release()
    return result


def stream(path: Path) -> Iterator[ParseResult]:
    """An export file's `events` and `quarantine` rows, a part per piece of the file (about
    CHUNK_BYTES each) in file order; the input's damage and notes come last, in a part of no rows."""
    yield from stream_pieces(pieces(path, CHUNK_BYTES, b"\n\n", SLACK), str(path), NAME)


def stream_pieces(parts: Iterator[Piece], source_file: str, fmt: str) -> Iterator[ParseResult]:
    """`stream` over pieces of export text from anywhere (a file, `journalctl -o export` of a
    journal: `forensics.sources.journal.journal_native`), the rows labelled with `fmt`; a ParseError while
    reading the pieces ends the input as its damage, the rows before it kept."""
    # Pieces are independent and numpy/polars release the GIL, so parsing uses both cores while
    # the next piece is decompressed. A piece is finished in file order once the piece after it
    # has arrived (a binary value may run on into it).
    damage, unclosed = None, False
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        waiting: deque[tuple[Piece, int, Future]] = deque()
        line_base = size = 0
        try:
            for piece in parts:
                size = piece.offset + piece.length
                waiting.append((piece, line_base, pool.submit(_read_piece, piece, line_base, source_file, fmt)))
                # the parser finds the newlines too, but the next piece's line numbers are needed now
                line_base += _export_scan.count_newlines(piece.data, piece.length)
                while len(waiting) > IN_FLIGHT:
                    events, quarantine, records, unclosed = _finish(waiting, source_file, fmt)
                    yield ParseResult("events", events, quarantine, records=records)
        except ParseError as error:  # a compressed copy cut short: keep the entries before the break
            damage = str(error)
        while waiting:
            events, quarantine, records, unclosed = _finish(waiting, source_file, fmt)
            yield ParseResult("events", events, quarantine, records=records)
    notes = ["the last entry ends the file without its blank line: read as whole (systemd-journal-remote would "
             "drop it as a premature end of file)"] if unclosed else []
    yield ParseResult("events", empty(EVENTS_SCHEMA), empty(QUARANTINE_SCHEMA), records=0, damage=damage, notes=notes,
                      text_read=(line_base, size))


def parse(path: Path) -> ParseResult:
    """Read an export file into `events` and `quarantine` rows."""
    return combine(list(stream(path)))


register(NAME, sniff, parse, module=__name__, stream=stream)
