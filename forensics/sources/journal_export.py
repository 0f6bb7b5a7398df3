"""Journal Export Format (`journalctl -o export`), plain or gzip/zstd/xz-compressed.

Spec: https://systemd.io/JOURNAL_EXPORT_FORMATS/ — entries are runs of `KEY=value` lines ended by
a blank line; a value that is not printable UTF-8 is written as `KEY\\n`, a 64-bit little-endian
length, the bytes, and `\\n`. Fields may repeat. Several hosts' exports may be concatenated.

The hot path is vectorised: numpy finds every newline and '=' once, binary fields (rare) are
walked one by one, keys become zero-copy Binary views that polars codes, and each field's values
become one column (copied out dense, or views into a memory-mapped file: see DENSE_FIELDS). The
file is read in pieces of about 8 MB cut at entry boundaries, parsed and assembled two at a time
while the next piece is decompressed (`forensics.rawio.pieces`).
"""

from __future__ import annotations

import dataclasses
import os
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import polars as pl

from forensics.byteviews import SLACK, binary_views, dense_binary
from forensics.errors import ParseError
from forensics.journal import FIELD_NAME, assemble_events, field_name_problem
from forensics.rawio import Piece, pieces
from forensics.schema import EVENTS_SCHEMA, EXCERPT_CHARS, QUARANTINE_SCHEMA, RAW_FIELD, empty
from forensics.sources import ParseResult, register

NAME = "journal_export"
CHUNK_BYTES = 8 << 20
# Fields copied out dense even from a memory-mapped file (elsewhere values are views into the
# file's pages): every detector searches messages, and a regex over values scattered through the
# file runs several times slower than over the same values end to end (`byteviews.dense_binary`).
# Decompressed pieces have every value copied out, so that their memory carries the next piece.
DENSE_FIELDS = {"MESSAGE"}
_NL, _EQ = 10, 61


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


def _parse_chunk(readable: np.ndarray, m: int, at_eof: bool, byte_base: int, line_base: int,
                 copy: bool = True) -> pl.DataFrame:
    """Parse one chunk (whole entries, the first `m` bytes of `readable`, found at `byte_base` in
    the file, after `line_base` lines) into a field frame (see `forensics.journal`); with `copy`,
    every value is copied out of `readable`, so that its memory can be used again."""
    a = readable[:m]
    newlines = np.flatnonzero(a == _NL)
    unterminated_line = m > 0 and a[m - 1] != _NL
    ends = np.append(newlines, m) if unterminated_line else newlines
    starts = np.empty_like(ends)
    if len(ends):
        starts[0] = 0
        starts[1:] = ends[:-1] + 1
    equals = np.flatnonzero(a == _EQ)
    nxt = np.searchsorted(equals, starts)
    first_eq = np.append(equals, m)[nxt]
    has_eq = first_eq < ends
    blank = starts == ends
    alive = np.ones(len(ends), bool)
    binary = np.zeros(len(ends), bool)
    value_start = first_eq + 1
    value_end = ends.copy()
    key_end = np.where(has_eq, first_eq, ends)
    line_problem: dict[int, str] = {}

    # Binary fields: headers are non-blank lines without '='; walked in order because their
    # payload may contain newlines that must not be read as lines.
    resume = 0
    for i in np.flatnonzero(~has_eq & ~blank).tolist():
        if i < resume:
            continue
        name = a[starts[i]:ends[i]].tobytes()
        problem = field_name_problem(name)
        if problem:
            line_problem[i] = f"no '=' and {problem}"
            continue
        size_at = int(ends[i]) + 1
        if size_at + 8 > m:
            if not at_eof:
                raise _Overrun
            line_problem[i] = f"binary field {name.decode()}: length cut off by end of file"
            alive[i + 1:] = False
            break
        size = int.from_bytes(a[size_at:size_at + 8].tobytes(), "little")
        payload_end = size_at + 8 + size
        if payload_end >= m:
            if not at_eof:
                raise _Overrun
            line_problem[i] = (f"binary field {name.decode()}: length {size} runs past "
                               f"end of file ({m - size_at - 8} bytes left)")
            continue
        if a[payload_end] != _NL:
            line_problem[i] = (f"binary field {name.decode()}: {size}-byte value "
                               f"not followed by a newline")
            continue
        last = int(np.searchsorted(ends, payload_end))
        alive[i + 1:last + 1] = False
        binary[i] = True
        value_start[i] = size_at + 8
        value_end[i] = payload_end
        resume = last + 1

    live = np.flatnonzero(alive)
    if not at_eof and (len(live) == 0 or not blank[live[-1]]):
        # The "\n\n" this chunk was cut at lies inside or at the end of a binary value, so the
        # chunk does not end between entries: extend it.
        raise _Overrun
    live_blank = blank[live]
    content = live[~live_blank]
    previous_blank = np.concatenate(([True], live_blank[:-1]))
    opens = live[~live_blank & previous_blank]
    entry_of_line = np.full(len(ends), -1, np.int64)
    entry_of_line[live] = np.cumsum(~live_blank & previous_blank) - 1
    n_entries = len(opens)
    entry_start = starts[opens]
    last_line = content[np.searchsorted(entry_of_line[content], np.arange(n_entries), side="right") - 1]
    entry_end = ends[last_line]

    entry_problem: list[str | None] = [None] * n_entries
    problem_line: list[int | None] = [None] * n_entries
    is_field = (has_eq | binary) & alive & ~blank
    field_lines = np.flatnonzero(is_field)
    keys = binary_views(readable, starts[field_lines], key_end[field_lines])
    # Dense code per distinct key: a hash join against the few distinct keys, not a sort of all lines.
    distinct = keys.unique().to_frame("key").with_row_index("code")
    codes = (keys.to_frame("key").join(distinct, on="key", how="left", maintain_order="left")
             .get_column("code").to_numpy())
    names = distinct.get_column("key").to_list()

    for line, problem in line_problem.items():
        if alive[line] and entry_of_line[line] >= 0 and entry_problem[entry_of_line[line]] is None:
            entry_problem[entry_of_line[line]] = problem
            problem_line[entry_of_line[line]] = line + 1

    columns: dict[str, pl.Series] = {}
    raw_items: list[tuple[np.ndarray, str, pl.Series]] = []
    small = codes.astype(np.uint16) if len(names) < 65536 else codes
    order = np.argsort(small, kind="stable")
    bounds = np.searchsorted(small[order], np.arange(len(names) + 1))
    for code, name_bytes in enumerate(names):
        lines_of_key = field_lines[order[bounds[code]:bounds[code + 1]]]
        member_entries = entry_of_line[lines_of_key]
        problem = field_name_problem(name_bytes)
        if problem:
            for line, entry in zip(lines_of_key.tolist(), member_entries.tolist(), strict=True):
                if entry_problem[entry] is None:
                    entry_problem[entry] = problem
                    problem_line[entry] = line + 1
            continue
        name = name_bytes.decode("ascii")
        repeat = np.zeros(len(lines_of_key), bool)
        repeat[1:] = member_entries[1:] == member_entries[:-1]
        # One value per entry (null where the entry lacks the field): copied out dense, or a view
        # into the file map (see DENSE_FIELDS).
        line_of_entry = np.zeros(n_entries, np.int64)
        present = np.zeros(n_entries, bool)
        line_of_entry[member_entries[~repeat]] = lines_of_key[~repeat]
        present[member_entries[~repeat]] = True
        values = dense_binary if copy or name in DENSE_FIELDS else binary_views
        columns[name] = values(readable, value_start[line_of_entry], value_end[line_of_entry], present).alias(name)
        if repeat.any():
            later = lines_of_key[repeat]
            raw_items.append((member_entries[repeat], name, values(readable, value_start[later], value_end[later])))

    # The last entry of the file must be closed by a blank line, or it was cut short.
    closed = not unterminated_line and blank[len(ends) - 1] and alive[len(ends) - 1] if len(ends) else True
    if at_eof and n_entries and entry_problem[-1] is None and not closed:
        entry_problem[-1] = "entry at end of file is not closed by a blank line (file truncated?)"
        problem_line[-1] = int(opens[-1]) + 1

    located = [None if why is None else f"line {at + line_base}: {why}"
               for why, at in zip(entry_problem, problem_line, strict=True)] if any(entry_problem) else None
    frame = pl.DataFrame(columns, height=n_entries) if columns else pl.DataFrame(height=n_entries)
    frame = frame.with_columns(
        pl.Series("@offset", entry_start + byte_base, dtype=pl.Int64),
        pl.Series("@line", opens + 1 + line_base, dtype=pl.Int64),
        pl.Series("@problem", located, dtype=pl.String) if located else pl.lit(None, pl.String).alias("@problem"),
        binary_views(readable, entry_start, np.minimum(entry_end, entry_start + EXCERPT_CHARS))
        .alias("@excerpt"),
    )
    if raw_items:
        raw = pl.concat([
            pl.DataFrame({"row": rows, "name": [name] * len(rows), "value": vals})
            for rows, name, vals in raw_items
        ]).sort("row", maintain_order=True).group_by("row", maintain_order=True).agg(
            pl.struct("name", "value").cast(RAW_FIELD).alias("@raw"))
        frame = (frame.with_row_index("@row").join(raw.rename({"row": "@row"}).with_columns(pl.col("@row").cast(pl.UInt32)),
                                                   on="@row", how="left").drop("@row"))
    return frame


def _read_piece(piece: Piece, line_base: int, source_file: str
                ) -> tuple[pl.DataFrame, pl.DataFrame, int] | _Overrun:
    """One piece's `events` and `quarantine` rows and its record count."""
    try:
        fields = _parse_chunk(piece.data, piece.length, piece.at_eof, piece.offset, line_base, piece.reusable)
    except _Overrun as overrun:
        return overrun
    events, quarantine = assemble_events(fields, source_file=source_file, fmt=NAME)
    return events, quarantine, fields.height


IN_FLIGHT = 4  # pieces parsed or waiting for a worker: enough to keep two busy


def _finish(waiting: deque[tuple[Piece, int, Future]], source_file: str) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """The oldest waiting piece's rows; its memory goes back for later pieces."""
    piece, line_base, job = waiting.popleft()
    result = job.result()
    while isinstance(result, _Overrun):  # a binary value crosses the cut: parse it with the next piece
        if not waiting:  # there is none (the input broke off after this one): this piece ends the file
            result = _read_piece(dataclasses.replace(piece, at_eof=True), line_base, source_file)
            break
        after, _, its_job = waiting.popleft()
        its_job.result()  # that piece was parsed on its own as well: wait for it, then drop that
        joined = piece.joined(after, SLACK)
        piece.release()
        after.release()
        piece, result = joined, _read_piece(joined, line_base, source_file)
    piece.release()
    return result


def parse(path: Path) -> ParseResult:
    """Read an export file into `events` and `quarantine` rows."""
    # Pieces are independent and numpy/polars release the GIL, so parsing uses both cores while
    # the next piece is decompressed. A piece is finished in file order once the piece after it
    # has arrived (a binary value may run on into it).
    done: list[tuple[pl.DataFrame, pl.DataFrame, int]] = []
    damage = None
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        waiting: deque[tuple[Piece, int, Future]] = deque()
        line_base = 0
        try:
            for piece in pieces(path, CHUNK_BYTES, b"\n\n", SLACK):
                waiting.append((piece, line_base, pool.submit(_read_piece, piece, line_base, str(path))))
                # the parser finds the newlines too, but the next piece's line numbers are needed now
                line_base += int(np.count_nonzero(piece.data[:piece.length] == _NL))
                while len(waiting) > IN_FLIGHT:
                    done.append(_finish(waiting, str(path)))
        except ParseError as error:  # a compressed copy cut short: keep the entries before the break
            damage = str(error)
        while waiting:
            done.append(_finish(waiting, str(path)))
    if not done:  # the input broke off before its first piece
        return ParseResult("events", empty(EVENTS_SCHEMA), empty(QUARANTINE_SCHEMA), records=0, damage=damage)
    events = pl.concat([e for e, _, _ in done], how="diagonal_relaxed")
    named = list(EVENTS_SCHEMA)  # columns beyond the schema in name order, whichever piece had them first
    events = events.select(*named, *sorted(set(events.columns) - set(named)))
    quarantine = pl.concat([q for _, q, _ in done])
    return ParseResult("events", events, quarantine, records=sum(n for _, _, n in done), damage=damage)


register(NAME, sniff, parse, module=__name__)
