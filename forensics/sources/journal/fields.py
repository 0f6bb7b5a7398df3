"""What every journald loader shares: field-name rules and turning journal fields into `events`.

A loader hands over a *field frame*: one row per record, one column per journal field under its
journal name (Binary or String, first value when repeated), plus bookkeeping columns whose names
start with '@' (never a valid journal field name):

- ``@offset`` / ``@line``: where the record starts in its file (null where unknown);
- ``@problem``: why the loader could not read the record (null when it could);
- ``@excerpt``: the record's first bytes, for the quarantine;
- ``@raw``: List(Struct(name, value)) of values a plain column cannot hold (repeated fields' later
  values, JSON's null for over-size fields).

`assemble_events` checks the fields a canonical column needs, decodes text, moves non-UTF-8 values
into ``raw_fields`` (lossily decoded in their column), and splits good records from quarantined ones.
Field rules follow systemd's Journal Export Format and `journal_field_valid()`:
upper-case ASCII letters, digits and underscores, not starting with a digit, at most 64 bytes.
"""

from __future__ import annotations

import re

import polars as pl

from forensics.sources.journal.cursor import PARSED, cursor_columns, parsed_cursor_columns
from forensics.sources.common.schema import (
    CONSUMED_FIELDS,
    EVENTS_SCHEMA,
    QUARANTINE_SCHEMA,
    RAW_FIELD,
    empty,
    excerpt_text,
)

FIELD_NAME = re.compile(rb"[A-Z_][A-Z0-9_]{0,63}")
DATA_TYPE = "journald:entry"
_TIME_AND_ADDRESS = ("__REALTIME_TIMESTAMP", "__MONOTONIC_TIMESTAMP", "_BOOT_ID", "__CURSOR")
# systemd's own messages about a unit carry UNIT/USER_UNIT; everything else its own unit.
UNIT_FIELDS = ("UNIT", "USER_UNIT", "_SYSTEMD_UNIT", "_SYSTEMD_USER_UNIT")
#: The journal fields behind the case's category columns (`EVENTS_SCHEMA`): identifiers, few
#: distinct values each written on many entries. A reader may hand them over as categories.
CATEGORY_FIELDS = ("_BOOT_ID", *UNIT_FIELDS,
                   *(field for field, target in CONSUMED_FIELDS.items() if EVENTS_SCHEMA[target] == pl.Categorical))


def field_name_problem(name: bytes) -> str | None:
    """Why `name` is not a valid journal field name, or None if it is."""
    if not name:
        return "empty field name"
    if FIELD_NAME.fullmatch(name):
        return None
    shown = name[:40].decode("utf-8", "backslashreplace")
    if len(name) > 64:
        return f"field name {shown!r}... longer than 64 bytes"
    if name[:1].isdigit():
        return f"field name {shown!r} starts with a digit"
    return f"invalid field name {shown!r} (only A-Z, 0-9 and _ allowed)"


def _is_utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _decode_text_columns(fields: pl.DataFrame) -> pl.DataFrame:
    """Binary field columns become String; values that are not UTF-8 are decoded with U+FFFD in
    their column and their exact bytes appended to ``@raw``."""
    binary = [n for n, t in fields.schema.items() if not n.startswith("@") and t == pl.Binary]
    try:
        return fields.with_columns(pl.col(binary).cast(pl.String))  # all columns at once, in parallel
    except pl.exceptions.ComputeError:
        pass
    casts = {}
    extra_raw: list[tuple[int, str, bytes | None]] = []
    for name in binary:
        column = fields.get_column(name)
        try:
            casts[name] = column.cast(pl.String)
        except pl.exceptions.ComputeError:
            # Rare: some value is not UTF-8. Find which, keep their bytes, decode them lossily.
            originals = column.to_list()
            broken = [i for i, b in enumerate(originals) if b is not None and not _is_utf8(b)]
            repaired = [b.decode("utf-8", "replace") if b is not None else None for b in originals]
            casts[name] = pl.Series(name, repaired, dtype=pl.String)
            extra_raw.extend((i, name, originals[i]) for i in broken)
    fields = fields.with_columns(**casts)
    return _append_raw(fields, extra_raw, before=True) if extra_raw else fields


def _append_raw(fields: pl.DataFrame, items: list[tuple[int, str, bytes | None]], *,
                before: bool = False) -> pl.DataFrame:
    """Add (row, name, value) items to the ``@raw`` list column (`before` what is there already)."""
    additions = (
        pl.DataFrame({"row": [i[0] for i in items], "name": [i[1] for i in items], "value": [i[2] for i in items]},
                     schema={"row": pl.UInt32, "name": pl.String, "value": pl.Binary})
        .group_by("row", maintain_order=True)
        .agg(pl.struct("name", "value").alias("added"))
    )
    existing = fields.get_column("@raw") if "@raw" in fields.columns else pl.Series("@raw", [None] * fields.height,
                                                                                      dtype=pl.List(RAW_FIELD))
    parts = [pl.col("@raw").fill_null([]), pl.col("added").fill_null([])]
    if before:
        parts.reverse()
    merged = (
        pl.DataFrame({"@raw": existing}).with_row_index("row")
        .join(additions, on="row", how="left")
        .select(pl.when(pl.col("@raw").is_null() & pl.col("added").is_null()).then(None)
                .otherwise(pl.concat_list(parts)).alias("@raw"))
    )
    return fields.with_columns(merged.get_column("@raw"))


def _column(fields: pl.DataFrame, name: str) -> pl.Expr:
    return pl.col(name) if name in fields.columns else pl.lit(None, dtype=pl.String)


# Wall-clock times at or past 2200-01-01 (µs since the epoch) come from damaged or forged records:
# no journal was written then, and such times overflow date arithmetic downstream.
LATEST_REALTIME_US = 7_258_118_400_000_000
INTEGER_FIELDS = ("__REALTIME_TIMESTAMP", "__MONOTONIC_TIMESTAMP", "_PID", "PRIORITY", "_SOURCE_REALTIME_TIMESTAMP")
#: The integer fields whose text the case does not keep (they become `events`' numbers): a reader may
#: hand a plainly written value over as its number in `@int <name>`, the text column holding the rest.
SCANNED_INTEGERS = ("__REALTIME_TIMESTAMP", "__MONOTONIC_TIMESTAMP", "_PID", "PRIORITY")


def _entry_time(fields: pl.DataFrame) -> pl.Expr:
    """When the entry was written: journald's `__REALTIME_TIMESTAMP`, else the sender's own
    `_SOURCE_REALTIME_TIMESTAMP` (collectors such as Vector re-serve entries with only that)."""
    return pl.coalesce(_integer(fields, "__REALTIME_TIMESTAMP"), _integer(fields, "_SOURCE_REALTIME_TIMESTAMP"))


def _with_integers(fields: pl.DataFrame) -> pl.DataFrame:
    """`fields` with each of INTEGER_FIELDS it has read as Int64 (null where it is not an integer)
    in an `@int <name>` column, once for both the checks and the events. Surrounding white space is
    allowed; only the few values a plain cast refuses are stripped and read again."""
    present = [name for name in INTEGER_FIELDS if name in fields.columns]
    fields = fields.with_columns(
        pl.coalesce(f"@int {name}", pl.col(name).cast(pl.Int64, strict=False)).alias(f"@int {name}")
        if f"@int {name}" in fields.columns else pl.col(name).cast(pl.Int64, strict=False).alias(f"@int {name}")
        for name in present)
    refused = fields.select(pl.col(name).is_not_null() & pl.col(f"@int {name}").is_null() for name in present)
    for name, mask in zip(present, refused.get_columns()):
        if mask.any():
            rows = mask.arg_true()
            again = fields.get_column(name)[rows].str.strip_chars().cast(pl.Int64, strict=False)
            fields = fields.with_columns(fields.get_column(f"@int {name}").scatter(rows, again))
    return fields


def _integer(fields: pl.DataFrame, name: str) -> pl.Expr:
    """An integer field as read by `_with_integers` (a null column if the frame lacks it)."""
    return pl.col(f"@int {name}") if f"@int {name}" in fields.columns else pl.lit(None, dtype=pl.Int64)


def _problems(fields: pl.DataFrame) -> pl.Expr:
    """The first reason a record cannot go into `events` (led by its line where known), or null."""
    # An entry without any time (the systemd documentation's JSON example has none) is well-formed: it
    # is read with its time unknown (`ts` null), as a stamp-less log line is, never quarantined for it.
    checks: list[tuple[pl.Expr, pl.Expr]] = []
    for name in ("__REALTIME_TIMESTAMP", "__MONOTONIC_TIMESTAMP", "_PID"):
        value = _column(fields, name)
        checks.append((value.is_not_null() & _integer(fields, name).is_null(),
                       pl.format("{} {} is not an integer", pl.lit(name), value.str.slice(0, 40))))
    realtime = _entry_time(fields)
    checks.append((realtime.is_not_null() & ~realtime.is_between(0, LATEST_REALTIME_US, closed="left"),
                   pl.format("entry time {} is outside 1970–2199 (a damaged or forged record)",
                             realtime.cast(pl.String))))
    priority = _integer(fields, "PRIORITY")
    # a plainly written number has no text (the scanner gave it as a number), and is written back the same
    written = pl.coalesce(_column(fields, "PRIORITY").str.slice(0, 40), priority.cast(pl.String))
    checks.append((written.is_not_null() & (priority.is_null() | ~priority.is_between(0, 7)),
                   pl.format("PRIORITY {} is not 0-7", written)))
    found: pl.Expr = pl.lit(None, dtype=pl.String)
    for condition, reason in reversed(checks):  # the first check that fails wins
        found = pl.when(condition).then(reason).otherwise(found)
    line = _column(fields, "@line")
    located = pl.when(line.is_not_null()).then(pl.format("line {}: {}", line, found)).otherwise(found)
    return pl.coalesce(_column(fields, "@problem"), located)


def _cursor(good: pl.DataFrame) -> dict[str, pl.Series]:
    """The good rows' cursors as the case holds them (`forensics.sources.journal.cursor`): parsed by
    the scanner, or here from the text a reader gave."""
    if PARSED[0] not in good.columns:
        good = good.with_columns(parsed_cursor_columns(_column(good, "__CURSOR").cast(pl.String)))
    # with_columns, not select: a column the frame lacks is a literal null as long as the frame
    entry = good.with_columns(_column(good, "__CURSOR").cast(pl.String).alias("@text"),
                              _column(good, "_BOOT_ID").alias("@boot"),
                              _integer(good, "__MONOTONIC_TIMESTAMP").alias("@m"),
                              _integer(good, "__REALTIME_TIMESTAMP").alias("@t"))
    return cursor_columns(good, *(entry.get_column(name) for name in ("@text", "@boot", "@m", "@t")))


def assemble_events(fields: pl.DataFrame, *, source_file: str, fmt: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Split a field frame into canonical `events` rows and `quarantine` rows."""
    if fields.height == 0:
        # literal columns on a frame without columns would make one row out of none
        return empty(EVENTS_SCHEMA), empty(QUARANTINE_SCHEMA)
    fields = _with_integers(_decode_text_columns(fields))
    fields = fields.with_columns(_problems(fields).alias("@why"))
    if fields.get_column("@why").null_count() == fields.height:  # as nearly always: no copy of every column
        bad, good = fields.clear(), fields
    else:
        bad = fields.filter(pl.col("@why").is_not_null())
        good = fields.filter(pl.col("@why").is_null())

    excerpts = bad.get_column("@excerpt").to_list() if "@excerpt" in bad.columns else [None] * bad.height
    quarantine = pl.DataFrame(
        {
            "source_file": [source_file] * bad.height,
            "format": [fmt] * bad.height,
            "offset": bad.get_column("@offset") if "@offset" in bad.columns else [None] * bad.height,
            "line": bad.get_column("@line") if "@line" in bad.columns else [None] * bad.height,
            "reason": bad.get_column("@why"),
            "excerpt": [excerpt_text(e) for e in excerpts],
            "subject": [None] * bad.height,
        },
        schema=dict(QUARANTINE_SCHEMA),
    )

    canonical = {
        "ts": _entry_time(good).cast(EVENTS_SCHEMA["ts"]),
        "__REALTIME_TIMESTAMP": _integer(good, "__REALTIME_TIMESTAMP"),
        "__MONOTONIC_TIMESTAMP": _integer(good, "__MONOTONIC_TIMESTAMP"),
        "_BOOT_ID": _column(good, "_BOOT_ID"),
        # each a category first: a reader may give some as categories, some as text
        "unit": pl.coalesce(*(_column(good, name).cast(pl.Categorical) for name in UNIT_FIELDS)),
        "data_type": pl.lit(DATA_TYPE),
        "format": pl.lit(fmt),
        "source_file": pl.lit(source_file),
        "source_offset": _column(good, "@offset").cast(pl.Int64),
        "source_line": _column(good, "@line").cast(pl.Int64),
        # One order whatever the loader: by field name, each field's values in the order read.
        "raw_fields": pl.col("@raw").cast(pl.List(RAW_FIELD)).list.eval(
            pl.element().sort_by(pl.element().struct.field("name"), maintain_order=True))
        if "@raw" in good.columns else pl.lit(None, dtype=pl.List(RAW_FIELD)),
    }
    canonical.update(_cursor(good))
    for field, target in CONSUMED_FIELDS.items():
        if target == "pid":
            canonical[target] = _integer(good, field)
        elif target == "priority":
            canonical[target] = _integer(good, field).cast(pl.Int8)
        else:
            canonical[target] = _column(good, field)
    consumed = set(CONSUMED_FIELDS) | set(_TIME_AND_ADDRESS)
    others = sorted(c for c in good.columns if not c.startswith("@") and c not in consumed)
    events = good.select(
        *[canonical[name].cast(dtype).alias(name) for name, dtype in EVENTS_SCHEMA.items()],
        *[pl.col(name).cast(pl.String) for name in others],
    )
    return events, quarantine


JournalValue = bytes | str | None
BATCH_RECORDS = 50_000
# Distinct field names one reader holds (each is a column; `_export_scan.c` holds as many a piece):
# journald and the programs it logs for write some hundreds. A record naming one past them is
# quarantined: 100 JSON lines of 1,000 names each made a case of 100,000 columns.
MAX_NAMES = 4096


class FieldFrameBuilder:
    """Collects records split into fields (name -> values in order) and turns every
    `BATCH_RECORDS` of them into a field frame, so Python objects never pile up for a whole file."""

    def __init__(self) -> None:
        """Start with no records."""
        self.frames: list[pl.DataFrame] = []
        self._records: list[dict[str, list[JournalValue]]] = []
        self._offsets: list[int | None] = []
        self._lines: list[int | None] = []
        self._problems: list[str | None] = []
        self._excerpts: list[JournalValue] = []
        self._names: set[str] = set()

    def add(self, record: dict[str, list[JournalValue]], *, offset: int | None = None, line: int | None = None,
            problem: str | None = None, excerpt: JournalValue = None) -> None:
        """Add one record (empty and with a `problem` when it could not be read); a record naming a
        field past the MAX_NAMES distinct ones the reader holds is added as such a problem."""
        new = [n for n in record if n not in self._names] if len(self._names) + len(record) > MAX_NAMES else []
        if len(self._names) + len(new) > MAX_NAMES:
            where = f"line {line}: " if line is not None else ""
            record, problem = {}, problem or (
                f"{where}field {new[0][:64]} past the {MAX_NAMES:,} distinct field names one input may hold: "
                "journald and the programs it logs for write some hundreds (forged or damaged)")
        self._names.update(record)
        self._records.append(record)
        self._offsets.append(offset)
        self._lines.append(line)
        self._problems.append(problem)
        self._excerpts.append(excerpt)
        if len(self._records) >= BATCH_RECORDS:
            self._flush()

    def _flush(self) -> None:
        if self._records:
            self.frames.append(field_frame(self._records, offsets=self._offsets, lines=self._lines,
                                           problems=self._problems, excerpts=self._excerpts))
        self._records, self._offsets, self._lines, self._problems, self._excerpts = [], [], [], [], []

    def build(self) -> pl.DataFrame:
        """All records added so far as one field frame."""
        self._flush()
        return pl.concat(self.frames, how="diagonal_relaxed") if self.frames else pl.DataFrame()


def field_frame(records: list[dict[str, list[JournalValue]]], *, offsets: list[int | None],
                lines: list[int | None], problems: list[str | None], excerpts: list[JournalValue]) -> pl.DataFrame:
    """A field frame from records already split into fields (each name mapped to its values in
    order), as the JSON and native loaders produce them. The first value of a field goes to its
    column; later values, and None values (journalctl's "too large to show"), go to ``@raw``."""
    names = sorted({name for record in records for name in record})
    columns: dict[str, list[JournalValue]] = {name: [None] * len(records) for name in names}
    raw: list[tuple[int, str, bytes | None]] = []
    for row, record in enumerate(records):
        for name, values in record.items():
            first = values[0]
            columns[name][row] = first
            if first is None:
                raw.append((row, name, None))
            for later in values[1:]:
                raw.append((row, name, later.encode() if isinstance(later, str) else later))
    series = []
    for name, values in columns.items():
        if any(isinstance(v, bytes) for v in values):
            series.append(pl.Series(name, [v.encode() if isinstance(v, str) else v for v in values], dtype=pl.Binary))
        else:
            series.append(pl.Series(name, values, dtype=pl.String))
    frame = pl.DataFrame([
        pl.Series("@offset", offsets, dtype=pl.Int64),
        pl.Series("@line", lines, dtype=pl.Int64),
        pl.Series("@problem", problems, dtype=pl.String),
        pl.Series("@excerpt", [e.encode() if isinstance(e, str) else e for e in excerpts], dtype=pl.Binary),
    ]).with_columns(series)
    return _append_raw(frame, raw) if raw else frame
