"""Native journal files (`*.journal`, rotated `*.journal~`) and whole journal directories.

Read with python-systemd's `systemd.journal._Reader` (the raw interface: field values as bytes,
repeated fields as lists), so the bytes are exactly those stored. The on-disk format is
https://systemd.io/JOURNAL_FILE_FORMAT/; journal files start with the magic "LPKSHHRH".
"""

from __future__ import annotations

from pathlib import Path

from forensics.errors import MissingSystemDependency, ParseError
from forensics.formats.journal import FieldFrameBuilder, JournalValue, assemble_events
from forensics.sources import ParseResult, register

NAME = "journal_native"
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


def _reader(path: Path):
    try:
        from systemd import journal
    except ImportError as error:
        raise MissingSystemDependency(
            f"{path}: reading .journal files needs the 'journal' extra: pip install 'forensics[journal]' "
            f"(it builds python-systemd, which needs Debian's libsystemd-dev and pkg-config)") from error
    try:
        if path.is_dir():
            return journal._Reader(flags=0, path=str(path))
        return journal._Reader(flags=0, files=[str(path)])
    except (OSError, ValueError) as error:
        raise ParseError(str(path), f"systemd cannot open it as a journal: {error}") from error


def parse(path: Path) -> ParseResult:
    """Read every entry of a journal file or directory into `events` and `quarantine` rows."""
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


register(NAME, sniff, parse, module=__name__)
