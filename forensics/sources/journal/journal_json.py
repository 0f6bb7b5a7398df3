"""`journalctl -o json` (one JSON object per line) and `-o json-seq` (RFC 7464, records led by 0x1E).

Spec: https://systemd.io/JOURNAL_EXPORT_FORMATS/#journal-json-format — values are strings;
a value that is not valid UTF-8 (or is binary) is an array of byte values; a field that occurs
more than once is an array of such values; a value larger than journalctl's limit is `null`.

Most lines hold only string values: those go through polars' JSON reader in one vectorised call.
A line that may hold an array or a null (it contains `":[` or `":null`), a key the reader was not
told about, or anything polars cannot read goes through Python's json module record by record,
which handles every shape exactly; the two halves are merged back in line order.
"""

from __future__ import annotations

import json
import mmap
import re
from pathlib import Path

import numpy as np
import polars as pl

from forensics.sources.common.byteviews import binary_views
from forensics.sources.journal import _export_scan
from forensics.sources.journal.fields import (
    FieldFrameBuilder,
    JournalValue,
    assemble_events,
    field_name_problem,
)
from forensics.sources.common.rawio import read_whole_lines
from forensics.sources.common.schema import EXCERPT_CHARS
from forensics.sources import ParseResult, register

NAME = "journal_json"
_SCHEMA_SAMPLE_LINES = 2000
MAX_FIELDS = 1024  # journald's ENTRY_FIELD_COUNT_MAX, as for exports


_DOCUMENT_START = re.compile(rb'^[\x1e \t\r\n]*\[?[ \t\r\n]*\{[ \t\r\n]*"')


def sniff(head: bytes, path: Path) -> bool:
    """A JSON object with journal fields (journalctl always writes __CURSOR or a field): one per
    line as journalctl writes them, pretty-printed, or inside a JSON array (as APIs re-serve them)."""
    if path.is_dir():
        return False
    return bool(_DOCUMENT_START.match(head)) and any(k in head for k in (b'"__CURSOR"', b'"__REALTIME_TIMESTAMP"',
                                                                          b'"MESSAGE"', b'"_BOOT_ID"'))


def _one_per_line(data: bytes | mmap.mmap) -> bool:
    """Whether records are one per line (journalctl's own output), not pretty-printed or in an array."""
    first = next((line for line in bytes(data[:65536]).split(b"\n") if line.strip(b"\x1e \t\r")), b"")
    first = first.strip(b"\x1e \t\r")
    return first.startswith(b"{") and first.endswith(b"}")


def _documents(text: str) -> pl.DataFrame:
    """Field frame of a file holding JSON values one after another, each an entry or an array of
    entries, laid out any way (pretty-printed, `[ … ]`): read with Python's json, value by value."""
    decoder = json.JSONDecoder()
    builder = FieldFrameBuilder()
    at = counted_to = 0
    line = 1
    while True:
        while at < len(text) and text[at] in "\x1e \t\r\n,":
            at += 1
        if at >= len(text):
            break
        line += text.count("\n", counted_to, at)  # counted on from the last value: not from the start each time
        counted_to = at
        try:
            value, end = decoder.raw_decode(text, at)
        except (ValueError, RecursionError) as error:
            why = "JSON nested too deeply" if isinstance(error, RecursionError) else f"invalid JSON: {error}"
            builder.add({}, offset=at, line=line, problem=f"line {line}: {why}", excerpt=text[at:at + EXCERPT_CHARS].encode())
            break  # where one value is broken, where the next starts is unknown
        items = value if isinstance(value, list) else [value]
        for item in items:
            try:
                record, problem = _record(item), None
            except ValueError as error:
                record, problem = {}, f"line {line}: {error}"
            builder.add(record, offset=at, line=line, problem=problem,
                        excerpt=json.dumps(item)[:EXCERPT_CHARS].encode())
        at = end
    return builder.build()


def _value(name: str, value: object) -> JournalValue:
    """One JSON field value as text or bytes; raises ValueError for shapes journalctl never writes."""
    if value is None:
        return value
    if isinstance(value, str):
        if not value.isascii():
            try:
                value.encode()
            except UnicodeEncodeError as error:  # `"\ud800"`: JSON may escape it, no text holds it
                raise ValueError(f"field {name} holds a lone surrogate ({value[error.start]!r}): journalctl "
                                 "writes no such text (forged or damaged)") from None
        return value
    if isinstance(value, list) and all(isinstance(b, int) and 0 <= b <= 255 for b in value):
        return bytes(value)
    raise ValueError(f"field {name} has a value that is neither a string, a byte array nor null")


def _record(obj: object) -> dict[str, list[JournalValue]]:
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, found {type(obj).__name__}")
    if len(obj) > MAX_FIELDS:
        raise ValueError(f"more than {MAX_FIELDS} fields: journald writes no such entry (forged or damaged)")
    record: dict[str, list[JournalValue]] = {}
    for name, value in obj.items():
        problem = field_name_problem(name.encode("utf-8", "surrogatepass"))  # a lone surrogate: no valid name
        if problem:
            raise ValueError(problem)
        is_repeated = isinstance(value, list) and value and not all(isinstance(b, int) for b in value)
        record[name] = [_value(name, v) for v in value] if is_repeated else [_value(name, value)]
    return record


def _slow(lines: list[tuple[int, int, bytes]]) -> pl.DataFrame:
    """Field frame of (line number, offset, text) lines read one by one with Python's json."""
    builder = FieldFrameBuilder()
    for number, offset, raw in lines:
        text = raw.strip(b"\x1e \t\r")
        try:
            record, problem = _record(json.loads(text)), None
        except UnicodeDecodeError as error:
            record, problem = {}, f"line {number}: not UTF-8 at byte {error.start}"
        except json.JSONDecodeError as error:
            record, problem = {}, f"line {number}: invalid JSON: {error.msg} (column {error.colno})"
        except RecursionError:
            record, problem = {}, f"line {number}: JSON nested too deeply to be a journal entry"
        except ValueError as error:
            record, problem = {}, f"line {number}: {error}"
        builder.add(record, offset=offset, line=number, problem=problem, excerpt=raw[:EXCERPT_CHARS])
    return builder.build()


def _fast(path: Path, data: bytes | mmap.mmap, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray,
          numbers: np.ndarray) -> tuple[pl.DataFrame, np.ndarray]:
    """Field frame of the lines polars can read exactly, and a mask of the lines it cannot."""
    everything_slow = (pl.DataFrame(), np.ones(len(starts), bool))
    try:
        text = binary_views(buf, starts, ends).cast(pl.String)
    except pl.exceptions.ComputeError:  # some line is not UTF-8: let Python name the byte
        return everything_slow
    # one pass in C over every line's `":` (polars' four contains and three counts took 8x the time)
    marks = _export_scan.json_line_marks(buf, np.ascontiguousarray(starts, np.int64), np.ascontiguousarray(ends, np.int64))
    keys_written, strings_written = (np.frombuffer(m, np.int32) for m in marks[:2])
    slow = np.frombuffer(marks[2], np.bool_).copy()  # a list or a null value: `":[`, `": [`, `":null`, `": null`
    fast_rows = np.flatnonzero(~slow)
    if len(fast_rows) == 0:
        return pl.DataFrame(), slow
    keys: set[str] = set()
    for line in text.gather(pl.Series(fast_rows[:_SCHEMA_SAMPLE_LINES])).to_list():
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):  # read (and quarantined) one by one later
            continue
        if isinstance(value, dict):
            keys.update(value)
    if not keys or len(keys) > MAX_FIELDS or any(field_name_problem(k.encode("utf-8", "surrogatepass")) for k in keys):
        return everything_slow
    if slow.any():
        # Blank out the lines Python will read, so polars' rows are exactly the fast lines.
        source: bytes | Path = bytearray(data)
        for i in np.flatnonzero(slow).tolist():
            source[starts[i]:ends[i]] = b" " * int(ends[i] - starts[i])
        source = bytes(source)
    else:
        source = path if isinstance(data, mmap.mmap) else bytes(data)
    try:
        frame = pl.read_ndjson(source, schema={k: pl.String for k in sorted(keys)})
    except pl.exceptions.PolarsError:
        return everything_slow
    if frame.height != len(fast_rows):
        return everything_slow
    # A line with a key outside the schema lost it, and one with a number or boolean value had it
    # turned into text: count its keys and string values, and send any mismatch back to Python.
    seen = frame.select(pl.sum_horizontal(pl.all().is_not_null())).to_series()
    written, strings = pl.Series(keys_written[fast_rows]), pl.Series(strings_written[fast_rows])
    lost = ((written != seen) | (written != strings) | (written > MAX_FIELDS)).to_numpy()
    if lost.any():
        slow[fast_rows[lost]] = True
        fast_rows = fast_rows[~lost]
        frame = frame.filter(pl.Series(~lost))
    frame = frame.with_columns(
        pl.Series("@offset", starts[fast_rows], dtype=pl.Int64),
        pl.Series("@line", numbers[fast_rows], dtype=pl.Int64),
        pl.Series("@problem", [None] * len(fast_rows), dtype=pl.String),
        binary_views(buf, starts[fast_rows], np.minimum(ends[fast_rows], starts[fast_rows] + EXCERPT_CHARS))
        .alias("@excerpt"),
    )
    return frame, slow


def parse(path: Path) -> ParseResult:
    """Read a JSON (or json-seq) journal export into `events` and `quarantine` rows."""
    data, damage = read_whole_lines(path)
    if len(data) and not _one_per_line(data):
        fields = _documents(bytes(data).decode("utf-8", "replace"))
        events, quarantine = assemble_events(fields, source_file=str(path), fmt=NAME)
        return ParseResult("events", events, quarantine, records=fields.height, damage=damage)
    buf = np.frombuffer(data, np.uint8) if len(data) else np.zeros(0, np.uint8)
    ends = np.frombuffer(_export_scan.newline_positions(buf, len(buf)), np.int64)  # numpy's == and nonzero: 20x the time
    if len(buf) and buf[-1] != 10:
        ends = np.append(ends, len(buf))
    starts = np.concatenate(([0], ends[:-1] + 1)) if len(ends) else ends
    numbers = np.arange(1, len(ends) + 1)
    # Records are the lines holding anything but white space and json-seq's record separators.
    short = np.flatnonzero(ends - starts <= 8).tolist()
    blank = [i for i in short if not bytes(buf[starts[i]:ends[i]]).strip(b"\x1e \t\r")]
    keep = np.ones(len(starts), bool)
    keep[blank] = False
    starts, ends, numbers = starts[keep], ends[keep], numbers[keep]
    if b"\x1e" in bytes(data[:4096]):
        fast, slow = pl.DataFrame(), np.ones(len(starts), bool)  # json-seq: read record by record
    else:
        fast, slow = _fast(path, data, buf, starts, ends, numbers)
    rows = np.flatnonzero(slow).tolist()
    slow_frame = _slow([(int(numbers[i]), int(starts[i]), bytes(buf[starts[i]:ends[i]])) for i in rows])
    frames = [f for f in (fast, slow_frame) if f.width]
    fields = pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()
    if len(frames) == 2:
        fields = fields.sort("@line")
    events, quarantine = assemble_events(fields, source_file=str(path), fmt=NAME)
    return ParseResult("events", events, quarantine, records=fields.height, damage=damage)


register(NAME, sniff, parse, module=__name__)
