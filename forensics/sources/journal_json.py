"""`journalctl -o json` (one JSON object per line) and `-o json-seq` (RFC 7464, records led by 0x1E).

Spec: https://systemd.io/JOURNAL_EXPORT_FORMATS/#journal-json-format — values are strings;
a value that is not valid UTF-8 (or is binary) is an array of byte values; a field that occurs
more than once is an array of such values; a value larger than journalctl's limit is `null`.
"""

from __future__ import annotations

import json
from pathlib import Path

from forensics.journal import FieldFrameBuilder, JournalValue, assemble_events, field_name_problem
from forensics.rawio import read_all
from forensics.sources import ParseResult, register

NAME = "journal_json"
_RS = b"\x1e"


def sniff(head: bytes, path: Path) -> bool:
    """A JSON object whose first key is a journal field (journalctl always writes __CURSOR or a field)."""
    if path.is_dir():
        return False
    start = head.lstrip(b"\x1e \t\r\n")
    return start.startswith(b'{"') and any(k in head for k in (b'"__CURSOR"', b'"__REALTIME_TIMESTAMP"',
                                                               b'"MESSAGE"', b'"_BOOT_ID"'))


def _value(name: str, value: object) -> JournalValue:
    """One JSON field value as text or bytes; raises ValueError for shapes journalctl never writes."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(b, int) and 0 <= b <= 255 for b in value):
        return bytes(value)
    raise ValueError(f"field {name} has a value that is neither a string, a byte array nor null")


def _record(obj: object) -> dict[str, list[JournalValue]]:
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, found {type(obj).__name__}")
    record: dict[str, list[JournalValue]] = {}
    for name, value in obj.items():
        problem = field_name_problem(name.encode())
        if problem:
            raise ValueError(problem)
        is_repeated = isinstance(value, list) and value and not all(isinstance(b, int) for b in value)
        record[name] = [_value(name, v) for v in value] if is_repeated else [_value(name, value)]
    return record


def parse(path: Path) -> ParseResult:
    """Read a JSON (or json-seq) journal export into `events` and `quarantine` rows."""
    data = bytes(read_all(path))
    builder = FieldFrameBuilder()
    offset = 0
    for number, raw in enumerate(data.split(b"\n"), start=1):
        at = offset
        offset += len(raw) + 1
        text = raw.strip(b"\x1e \t\r")
        if not text:
            continue
        try:
            record = _record(json.loads(text))
            problem = None
        except UnicodeDecodeError as error:
            record, problem = {}, f"line {number}: not UTF-8 at byte {error.start}"
        except json.JSONDecodeError as error:
            record, problem = {}, f"line {number}: invalid JSON: {error.msg} (column {error.colno})"
        except ValueError as error:
            record, problem = {}, f"line {number}: {error}"
        builder.add(record, offset=at, line=number, problem=problem, excerpt=raw[:80])
    fields = builder.build()
    events, quarantine = assemble_events(fields, source_file=str(path), fmt=NAME)
    return ParseResult("events", events, quarantine, records=fields.height)


register(NAME, sniff, parse, module=__name__)
