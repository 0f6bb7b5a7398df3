"""`py-spy dump --json`: a JSON array of threads, each with its frames, one array per process.

Fields as py-spy 0.4 serialises `StackTrace` (src/stack_trace.rs): `pid`, `thread_id` (Python's),
`thread_name`, `os_thread_id`, `active`, `owns_gil`, `frames` (innermost first: `name`,
`filename`, `module`, `short_filename`, `line` — 0 when unknown —, `locals`, `is_entry`) and
`process_info`. There is no process header and no time: the capture header before each array
(`forensics.sources.common.snapshot_time`) gives time, host, group, and the title that ranks are read from.

A file may hold several dumps, each after its own capture header. Records are dumps; a dump that
is not a complete array of threads (cut mid-array, py-spy's `Error:` text, an empty array) is
quarantined with the reason. Each array is read by polars' JSON reader and exploded into frames.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl

from forensics.sources.pyspy import dumps
from forensics.sources.common.snapshot_time import HEADER_PREFIX, from_path
from forensics.sources.pyspy.dumps import DumpContext, capture_of, subject_of
from forensics.sources.common.rawio import read_all
from forensics.sources import ParseResult, register
from forensics.sources.pyspy.pyspy_text import title_rank_refused, untitled_subject

NAME = "pyspy_json"
FORMAT = "pyspy:json"

_LOCAL = pl.Struct({"name": pl.String, "addr": pl.UInt64, "arg": pl.Boolean, "repr": pl.String})
_FRAME = pl.Struct({"name": pl.String, "filename": pl.String, "module": pl.String,
                    "short_filename": pl.String, "line": pl.Int64, "locals": pl.List(_LOCAL),
                    "is_entry": pl.Boolean})
_THREAD: dict[str, pl.DataType] = {"pid": pl.Int64(), "thread_id": pl.UInt64(), "thread_name": pl.String(),
                                     "os_thread_id": pl.Int64(), "active": pl.Boolean(), "owns_gil": pl.Boolean(),
                                     "frames": pl.List(_FRAME)}
_HEADER = re.compile(rb"(?m)^" + re.escape(HEADER_PREFIX.encode()) + rb".*$")
_SNIFF = re.compile(rb'^\s*\[\s*(?:\]|\{\s*"pid"\s*:)')


def sniff(head: bytes, path: Path) -> bool:
    """A JSON array whose first thread starts with py-spy's `"pid"` key (after any capture headers)."""
    if path.is_dir():
        return False
    body = _HEADER.sub(b"", head)
    return bool(_SNIFF.match(body)) and (b'"thread_id"' in head or body.strip().startswith(b"[]"))


def _read(text: str) -> pl.DataFrame | str:
    """A dump's threads, or why its text is not a readable thread array."""
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            threads = pl.read_json(stripped.encode(), schema=_THREAD)
        except (pl.exceptions.PolarsError, ValueError):
            pass  # Python's reader below says exactly what is wrong
        else:
            if threads.height and threads.get_column("frames").null_count() == 0:
                return threads
    return _problem(stripped)


def _problem(stripped: str) -> str:
    """Why a dump's text is not a readable thread array."""
    if stripped.startswith("Error:"):
        return "py-spy failed: " + " ".join(stripped.removeprefix("Error:").split())
    try:
        value = json.loads(stripped)
    except RecursionError:
        return "JSON nested too deeply to be a py-spy dump"
    except json.JSONDecodeError as error:
        cut = stripped.startswith("[") and not stripped.endswith("]")
        return ("JSON dump cut short: " if cut else "not valid JSON: ") + f"{error.msg} at char {error.pos}"
    if not isinstance(value, list):
        return f"expected an array of threads, found a JSON {type(value).__name__}"
    if not value:
        return "no threads in the dump"
    return "array items are not py-spy threads (no 'frames')"


def _header_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of every capture header line; str.find, because a regex scan of a JSON file
    of hundreds of MB is slow."""
    spans = []
    marker = "\n" + HEADER_PREFIX
    found = -1 if text.startswith(HEADER_PREFIX) else text.find(marker)
    at = None if found < 0 and not text.startswith(HEADER_PREFIX) else found + 1
    while at is not None:
        end = text.find("\n", at)
        end = len(text) if end < 0 else end
        spans.append((at, end))
        found = text.find(marker, end)
        at = None if found < 0 else found + 1
    return spans


def _split(text: str) -> list[tuple[int, str | None, str]]:
    """(first line, header line or None, body) of each dump in the file."""
    parts: list[tuple[int, str | None, str]] = []
    header: str | None = None
    start_line, start_char = 1, 0
    counted_to, line = 0, 1  # lines are counted incrementally: the file may be hundreds of MB
    for begin, end in _header_spans(text):
        body = text[start_char:begin]
        if body.strip():
            parts.append((start_line, header, body))
        header = text[begin:end]
        line += text.count("\n", counted_to, end)
        counted_to = end
        start_line = line + 1
        start_char = end + 1
    body = text[start_char:]
    if body.strip() or not parts:
        parts.append((start_line, header, body))
    return parts


def parse(path: Path) -> ParseResult:
    """Read one py-spy JSON file (one or more dumps)."""
    text = bytes(read_all(path)).decode("utf-8", "replace")
    source_file = str(path)
    fallback = from_path(path)
    contexts: list[DumpContext] = []
    threads: list[pl.DataFrame] = []
    bad: list[tuple[int | None, str, str, str | None]] = []
    for index, (line, header, body) in enumerate(_split(text)):
        capture = capture_of(fallback, header)
        first_line = line + body[:len(body) - len(body.lstrip())].count("\n")  # where the array starts
        dump = _read(body)
        if isinstance(dump, str):
            bad.append((first_line, dump, body.strip(), subject_of(capture)))
            continue
        if (refused := title_rank_refused(capture.labels.get("title"))) is not None:
            bad.append((first_line, refused, (header or "")[:200], untitled_subject(capture)))
            continue
        threads.append(dump.with_columns(pl.lit(index, pl.Int32).alias("dump"),
                                         pl.lit(first_line).alias("source_line")))
        contexts.append(DumpContext(index, capture))
    if not threads:
        return dumps.result(source_file, FORMAT, None, contexts, bad)
    frame = pl.concat(threads).with_row_index("thread_order")
    frames = (frame.with_columns(pl.col("frames").list.len().alias("n_frames"))
              .explode("frames", empty_as_null=True)  # a thread with no frames keeps one row
              .with_columns(pl.col("frames").struct.unnest())
              .with_columns(
                  pl.when(pl.col("n_frames") > 0).then(pl.int_range(pl.len()).over("thread_order"))
                  .cast(pl.Int32).alias("depth"),
                  pl.when(pl.col("owns_gil") & pl.col("active")).then(pl.lit("active+gil"))
                  .when(pl.col("active")).then(pl.lit("active")).otherwise(pl.lit("idle")).alias("status"),
                  # py-spy's text form names a thread by its OS id when it has one: do the same.
                  pl.coalesce(pl.col("os_thread_id"), pl.col("thread_id").cast(pl.Int64, strict=False))
                  .alias("thread_id"),
                  pl.coalesce("short_filename", "filename").alias("file"),
                  # a line past Int32 is no source line (forged or damaged): none, as the text reader reads it
                  pl.when(pl.col("line") > 0).then(pl.col("line")).cast(pl.Int32, strict=False).alias("line"),
                  pl.col("name").alias("function"),
                  pl.col("locals").list.eval(pl.struct(pl.element().struct.field("name"),
                                                       pl.element().struct.field("repr").alias("value"),
                                                       pl.element().struct.field("arg"))).alias("locals"),
              ))
    return dumps.result(source_file, FORMAT, frames, contexts, bad)


register(NAME, sniff, parse, module=__name__)
