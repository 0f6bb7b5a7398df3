"""Declared, timezone-aware schemas of the canonical frames, and one check that lists every problem.

Parsers keep every raw time field; only the timeline (`forensics.timeline.clocks`, a later stage) may decide a different `ts`.
Until then `ts` is `__REALTIME_TIMESTAMP` read as UTC microseconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from forensics.errors import ForensicsError, SchemaError

UTC_US = pl.Datetime("us", time_zone="UTC")

RAW_FIELD = pl.Struct({"name": pl.String, "value": pl.Binary})

#: One row per journal record. Columns after these are the record's other journal fields,
#: each under its own journal name as a String, sorted by name. Identifiers of few distinct values
#: (a boot, a unit, an input file) are categories, as in `samples`: each value is stored and hashed
#: once, not once per record (the Parquet writer would hash every row to build its dictionary, and
#: the timeline would hash them again to count lines per unit).
EVENTS_SCHEMA: Mapping[str, pl.DataType] = {
    "ts": UTC_US,
    "__REALTIME_TIMESTAMP": pl.Int64(),
    "__MONOTONIC_TIMESTAMP": pl.Int64(),
    "_BOOT_ID": pl.Categorical(),
    # journald's cursor: text only where its values below cannot give it back exactly
    # (`forensics.sources.journal.cursor`; the case's readers give it whole)
    "__CURSOR": pl.String(),
    "cursor_seqnum_id": pl.Categorical(),
    "cursor_seqnum": pl.UInt64(),
    "cursor_xor": pl.UInt64(),
    "host": pl.String(),
    "unit": pl.Categorical(),
    "identifier": pl.Categorical(),
    "pid": pl.Int64(),
    "priority": pl.Int8(),
    "message_id": pl.Categorical(),
    "invocation_id": pl.Categorical(),
    "message": pl.String(),
    "data_type": pl.Categorical(),
    "format": pl.Categorical(),
    "source_file": pl.Categorical(),
    "source_offset": pl.Int64(),
    "source_line": pl.Int64(),
    # Values a plain column cannot hold exactly: a repeated field's 2nd and later values, the
    # original bytes of a value that is not UTF-8, and a field journalctl left out as too large
    # (value null). Null when the record has none.
    "raw_fields": pl.List(RAW_FIELD),
}


def as_events(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame`'s canonical columns in EVENTS_SCHEMA's types and order (a reader's text identifiers
    made categories, those it has no value for null), then its other columns as they are."""
    return frame.select(*(pl.col(name).cast(dtype) if name in frame.columns else pl.lit(None, dtype).alias(name)
                          for name, dtype in EVENTS_SCHEMA.items()),
                        *(name for name in frame.columns if name not in EVENTS_SCHEMA))


#: Journal fields that become a canonical column (and so are not kept twice).
CONSUMED_FIELDS: Mapping[str, str] = {
    "_HOSTNAME": "host",
    "SYSLOG_IDENTIFIER": "identifier",
    "_PID": "pid",
    "PRIORITY": "priority",
    "MESSAGE_ID": "message_id",
    "_SYSTEMD_INVOCATION_ID": "invocation_id",
    "MESSAGE": "message",
}

#: One row per record that could not be read.
QUARANTINE_SCHEMA: Mapping[str, pl.DataType] = {
    "source_file": pl.String(),
    "format": pl.String(),
    "offset": pl.Int64(),
    "line": pl.Int64(),
    "reason": pl.String(),
    "excerpt": pl.String(),
    # What the record was about when the reader knows it without reading it, as `key=value`
    # words (e.g. a failed py-spy dump's `pid=4242 group=decode` from its capture header).
    "subject": pl.String(),
}

EXCERPT_CHARS = 80


def excerpt_text(raw: bytes | str | None) -> str:
    """A short, printable excerpt of a bad record for the quarantine."""
    if raw is None:
        return ""
    text = raw.decode("utf-8", "backslashreplace") if isinstance(raw, bytes) else raw
    text = text.replace("\x00", "\\x00").replace("\n", "\\n")
    return text[:EXCERPT_CHARS]

#: One row per stack frame of a py-spy dump (depth 0 = innermost); a thread with no frames is one
#: row with null depth. Time and context come from the bundle (`forensics.sources.common.snapshot_time`), not the dump.
STACKS_SCHEMA: Mapping[str, pl.DataType] = {
    "ts": UTC_US,
    "ts_source": pl.String(),
    "ts_confidence": pl.String(),
    "host": pl.String(),
    "group": pl.String(),  # the engine the process belongs to, when the bundle says
    "pid": pl.Int64(),
    "title": pl.String(),  # py-spy's "Process N:" text: the command line, or the title set by setproctitle
    "python": pl.String(),
    "dp": pl.Int32(),
    "tp": pl.Int32(),
    "pp": pl.Int32(),
    "ep": pl.Int32(),
    "thread_id": pl.Int64(),
    "thread_name": pl.String(),
    "status": pl.String(),  # idle, active, active+gil; "gil" or null in core-dump mode
    "depth": pl.Int32(),
    "function": pl.String(),
    "file": pl.String(),
    "line": pl.Int32(),  # null for native frames without line information
    "locals": pl.List(pl.Struct({"name": pl.String, "value": pl.String, "arg": pl.Boolean})),
    "format": pl.String(),
    "data_type": pl.String(),
    "source_file": pl.String(),
    "source_line": pl.Int64(),
    "dump": pl.Int32(),  # which dump of the file: one process at one capture
}


#: Repeated strings of the samples frame are categorical: a scrape repeats its family, name,
#: help and label values for every sample, a file repeats them for every scrape.
CAT = pl.Categorical()
LABEL = pl.Struct({"name": CAT, "value": CAT})

#: One row per metric sample of a scrape (or of a Prometheus API range result).
SAMPLES_SCHEMA: Mapping[str, pl.DataType] = {
    "ts": UTC_US,  # when the scrape was taken (capture header, file name or mtime)
    "ts_source": CAT,
    "ts_confidence": CAT,
    "sample_ts": UTC_US,  # the sample's own timestamp, when the exposition gives one
    "instance": CAT,  # host:port of the target
    "host": CAT,
    "port": pl.Int32(),
    "family": CAT,  # metric family (histogram `x` for `x_bucket`, counter `x` for `x_total`)
    "name": CAT,  # the sample's own name
    "type": CAT,  # counter, gauge, histogram, summary, gaugehistogram, info, stateset, untyped/unknown
    "unit": CAT,
    "help": CAT,
    "labels": pl.List(LABEL),  # sorted by name, without __name__
    "series": CAT,  # name{a="1",b="2"}: the series' identity within an instance
    "value": pl.Float64(),
    "exemplar": pl.String(),  # OpenMetrics exemplar as written after "# "
    "format": CAT,
    "data_type": CAT,
    "source_file": CAT,
    "source_line": pl.Int64(),
    "scrape": pl.Int32(),  # which scrape of the file
}


def schema_problems(frame: pl.DataFrame | pl.LazyFrame, schema: Mapping[str, pl.DataType],
                    *, extra: type[pl.DataType] | None = pl.String) -> list[str]:
    """Every way `frame` departs from `schema`: missing columns, wrong types, disallowed extras."""
    actual = frame.collect_schema() if isinstance(frame, pl.LazyFrame) else frame.schema
    problems = []
    for name, dtype in schema.items():
        if name not in actual:
            problems.append(f"missing column {name!r} ({dtype})")
        elif actual[name] != dtype:
            problems.append(f"column {name!r} is {actual[name]}, expected {dtype}")
    for name, dtype in actual.items():
        if name in schema:
            continue
        if extra is None:
            problems.append(f"unexpected column {name!r}")
        elif not isinstance(dtype, extra):
            problems.append(f"extra column {name!r} is {dtype}, expected {extra.__name__}")
    return problems


def validate(frame: pl.DataFrame | pl.LazyFrame, schema: Mapping[str, pl.DataType], name: str,
             *, extra: type[pl.DataType] | None = pl.String) -> None:
    """Raise `SchemaError` listing every problem if `frame` does not match `schema`."""
    problems = schema_problems(frame, schema, extra=extra)
    if problems:
        raise SchemaError(name, problems)


def empty(schema: Mapping[str, pl.DataType]) -> pl.DataFrame:
    """An empty frame with exactly `schema`."""
    return pl.DataFrame(schema=dict(schema))


#: The canonical frames of rows read from inputs, by name, with their schemas (`events` may carry
#: further String columns: journal fields beyond the schema).
SCHEMAS: Mapping[str, Mapping[str, pl.DataType]] = {"events": EVENTS_SCHEMA, "samples": SAMPLES_SCHEMA,
                                                   "stacks": STACKS_SCHEMA}


@dataclass
class ParseResult:
    """What a parser read from one input: canonical rows, quarantined rows and the count of records seen."""

    frame: str  # which canonical frame the rows belong to, e.g. "events"
    rows: pl.DataFrame
    quarantine: pl.DataFrame
    records: int  # records seen = parsed + len(quarantine), checked by `check_accounting`
    # Records read into `rows`; None when each record is one row (a journal entry). A py-spy dump
    # (the record) is many rows (its frames).
    parsed_records: int | None = None
    # Why the input could only be read in part (e.g. a compressed copy cut short): what was read
    # before it is in `rows`, and the manifest reports this beside the counts.
    damage: str | None = None
    # What the reader changed or guessed to read the input (e.g. a py-spy dump pasted without its
    # head), in words: reported beside the counts, never silently.
    notes: list[str] = field(default_factory=list)
    # On a stream's last part: the lines and bytes of text it read, where the numbering of a text
    # read after it continues (`forensics.sources.journal.journal_native`'s folders).
    text_read: tuple[int, int] | None = None

    @property
    def parsed(self) -> int:
        """How many records were read into `rows`."""
        return self.rows.height if self.parsed_records is None else self.parsed_records

    def check_accounting(self, path: Path) -> None:
        """Raise if a record vanished: seen must equal parsed + quarantined."""
        if self.records != self.parsed + self.quarantine.height:
            raise ForensicsError(
                f"{path}: {self.records} records seen but {self.parsed} parsed + "
                f"{self.quarantine.height} quarantined"
            )


def quarantine_rows(source_file: str, fmt: str, rows: list[tuple[int | None, str, str, str | None]]
                    ) -> pl.DataFrame:
    """Quarantine rows from (line, reason, excerpt, subject) tuples."""
    return pl.DataFrame({
        "source_file": [source_file] * len(rows),
        "format": [fmt] * len(rows),
        "offset": [None] * len(rows),
        "line": [r[0] for r in rows],
        "reason": [r[1] for r in rows],
        "excerpt": [excerpt_text(r[2]) for r in rows],
        "subject": [r[3] for r in rows],
    }, schema=dict(QUARANTINE_SCHEMA))
