"""`py-spy dump` text output: one or many processes per file, with whatever a shell put between them.

The format, as py-spy 0.4 writes it (src/dump.rs, src/coredump.rs)::

    Process 4242: sglang::scheduler_TP3                 (core-dump mode: "Signal 6: core.4242" first)
    Python v3.11.7 (/usr/bin/python3.11)                (core-dump mode: no interpreter path)
    <blank>
    Thread 4242 (idle): "MainThread"                    id: OS thread id, or 0x… Python thread id;
        on_idle (sglang/srt/managers/scheduler.py:1234)     status idle | active | active+gil
            Arguments:                                  (--locals) then `name: repr` lines
                self: <Scheduler at 0x7f…>
        pthread_cond_wait (libc.so.6)                   (--native: no line number)

A failed dump is py-spy's `Error: …` line, with `Caused by:` lines under it. Lines that belong to
none of these (shell prompts, `ps` output, `=== pid 4242 ===` banners) are noise between dumps;
a line that starts like py-spy's but does not finish like it (a cut frame line) spoils its dump.

Records are dumps: each is parsed (its frames go to `stacks`) or quarantined with the reason.
Every line is classified by one regular expression over the whole file (polars), and the
process/thread/frame each line belongs to is found by forward fill, not by a loop over lines.
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from forensics import pyspy
from forensics.capture import HEADER_PREFIX
from forensics.pyspy import DumpContext, capture_of, subject_of
from forensics.rawio import read_all
from forensics.sources import ParseResult, register

NAME = "pyspy_text"
FORMAT = "pyspy:text"

# One alternation, one pass: which branch matched says what the line is.
_LINE = (
    r"^(?:"
    r"Process (?P<process_pid>\d+): (?P<process_title>.*)"
    r"|Python v(?P<python>\S+)(?: \(.*\))?"
    r"|Parent Process (?P<parent_pid>\d+): .*"
    r"|Signal (?P<signal>\d+): .*"
    r"|Thread (?P<thread_id>0[xX][0-9A-Fa-f]+|\d+)(?: \((?P<status>idle|active\+gil|active|gil)\))?"
    r"(?:: \"(?P<thread_name>.*)\")?"
    r"|    (?P<function>\S.*?) \((?P<file>[^()]*?)(?::(?P<lineno>\d+))?\)"
    r"|        (?P<locals_kind>Arguments|Locals):"
    r"|            (?P<local_name>[^:\s]+): (?P<local_value>.*)"
    r"|Error: (?P<error>.*)"
    r"|(?P<header>" + re.escape(HEADER_PREFIX) + r".*)"
    r"|=+ *(?:pid)? *(?P<banner_pid>\d*) *=+"
    r")$"
)
# Lines that start the way py-spy's do: when such a line fails `_LINE`, it is a damaged dump line.
_PYSPY_START = r"^(?:Process \d|Python v|Thread |    |Signal \d)"
_SNIFF = re.compile(rb"(?m)^(?:Process \d+: .*\n(?:Python v|Parent)|Signal \d+: .*\nProcess \d+: |"
                    rb"Thread (?:0x[0-9A-Fa-f]+|\d+) \((?:idle|active|active\+gil)\))")
_SNIFF_FAILED = re.compile(rb"(?m)^" + re.escape(HEADER_PREFIX.encode()) + rb".*\n(?:.*\n)*?Error: ")


def sniff(head: bytes, path: Path) -> bool:
    """py-spy text: a `Process N:` header followed by `Python v`, a core dump's `Signal N:`, a
    thread line with py-spy's status words, or a capture header followed by py-spy's `Error:`."""
    if path.is_dir():
        return False
    return bool(_SNIFF.search(head) or _SNIFF_FAILED.search(head))


def _kind() -> pl.Expr:
    g = pl.col("m").struct.field
    return (pl.when(g("process_pid").is_not_null()).then(pl.lit("process"))
            .when(g("python").is_not_null()).then(pl.lit("python"))
            .when(g("parent_pid").is_not_null()).then(pl.lit("parent"))
            .when(g("signal").is_not_null()).then(pl.lit("signal"))
            .when(g("thread_id").is_not_null()).then(pl.lit("thread"))
            .when(g("function").is_not_null()).then(pl.lit("frame"))
            .when(g("locals_kind").is_not_null()).then(pl.lit("locals_kind"))
            .when(g("local_name").is_not_null()).then(pl.lit("local"))
            .when(g("error").is_not_null()).then(pl.lit("error"))
            .when(g("header").is_not_null()).then(pl.lit("header"))
            .when(g("banner_pid").is_not_null()).then(pl.lit("banner"))
            .when(pl.col("text").str.strip_chars() == "").then(pl.lit("blank"))
            .when(pl.col("text").str.contains(_PYSPY_START)).then(pl.lit("damaged"))
            .otherwise(pl.lit("noise")))


def classify(text: str) -> pl.DataFrame:
    """Every line with its kind, the segment (dump, failure or noise) it falls in, and the line of
    the latest capture header, thread and frame before it."""
    lines = text.split("\n")
    cut = not text.endswith("\n")
    if not cut:
        lines.pop()
    frame = pl.DataFrame({"text": lines}).with_row_index("line", offset=1)
    frame = frame.with_columns(pl.col("text").str.extract_groups(_LINE).alias("m"))
    frame = frame.with_columns(_kind().alias("kind"))
    kind = pl.col("kind")
    # A dump starts at "Process" (unless a core dump's "Signal" line just started it), "Signal",
    # "Error", or a line that separates dumps (capture header, banner).
    starts = (kind.is_in(["signal", "error", "header", "banner"])
              | ((kind == "process") & (kind.shift(1) != "signal").fill_null(True)))
    line_if = lambda k: pl.when(kind == k).then(pl.col("line"))
    frame = frame.with_columns(
        starts.cast(pl.Int32).cum_sum().alias("segment"),
        line_if("header").forward_fill().alias("header_line"),
        pl.lit(cut).alias("file_cut"),
        (pl.col("line") == pl.col("line").max()).alias("last_line"),
    )
    over = "segment"
    frame = frame.with_columns(
        line_if("thread").forward_fill().over(over).alias("thread_line"),
        kind.first().over(over).alias("segment_kind"),
    )
    return frame.with_columns(
        line_if("frame").forward_fill().over(over, "thread_line").alias("frame_line"),
        line_if("locals_kind").forward_fill().over(over, "thread_line").alias("locals_line"),
    )


def _segment_checks(lines: pl.DataFrame) -> pl.DataFrame:
    """Per segment: what starts it, and what would spoil it as a dump."""
    kind = pl.col("kind")
    damaged = kind.is_in(["damaged"]) | ((kind == "frame") & pl.col("thread_line").is_null())
    return lines.group_by("segment", maintain_order=True).agg(
        pl.col("segment_kind").first().alias("kind"),
        pl.col("line").first().alias("first_line"),
        pl.col("text").first().alias("first_text"),
        pl.col("header_line").first(),
        pl.col("m").struct.field("process_pid").drop_nulls().first().cast(pl.Int64).alias("pid"),
        pl.col("m").struct.field("process_title").drop_nulls().first().alias("title"),
        pl.col("m").struct.field("python").drop_nulls().first().alias("python"),
        pl.col("m").struct.field("banner_pid").first().alias("banner_pid"),
        (kind == "thread").sum().alias("threads"),
        pl.col("line").filter(damaged).first().alias("damaged_line"),
        pl.col("text").filter(damaged).first().alias("damaged_text"),
        (pl.col("last_line") & pl.col("file_cut")).any().alias("cut"),
        pl.col("text").filter(kind != "blank").alias("error_text"),
    )


def _failure(seg: dict) -> str | None:
    """Why a dump segment cannot be read, or None when it can."""
    if seg["cut"]:
        return "dump cut short: the file ends in the middle of a line"
    if seg["damaged_line"] is not None:
        return f"line {seg['damaged_line']}: not a py-spy line: {seg['damaged_text'].strip()[:60]}"
    if seg["kind"] == "process" and seg["python"] is None:
        return "no 'Python v…' line after the process line"
    if seg["threads"] == 0:
        return "no threads in the dump"
    return None


def parse_text(text: str, path: Path, source_file: str | None = None) -> ParseResult:
    """Every dump in one py-spy text file: frames of readable dumps, a quarantine row per other."""
    source_file = source_file or str(path)
    lines = classify(text)
    segments = _segment_checks(lines)
    header_text = dict(lines.filter(pl.col("kind") == "header").select("line", "text").iter_rows())
    contexts: list[DumpContext] = []
    bad: list[tuple[int | None, str, str, str | None]] = []
    good_segments: list[int] = []
    previous_banner: str | None = None
    for seg in segments.iter_rows(named=True):
        capture = capture_of(path, header_text.get(seg["header_line"]))
        kind = seg["kind"]
        if kind in ("process", "signal"):
            why = _failure(seg)
            if why is None:
                good_segments.append(seg["segment"])
                contexts.append(DumpContext(seg["segment"], seg["first_line"], capture))
            else:
                bad.append((seg["first_line"], why, seg["first_text"], subject_of(capture, seg["pid"], seg["title"])))
        elif kind == "error":
            cause = " ".join(t.strip() for t in seg["error_text"][1:] if t.strip() and t.strip() != "Caused by:")
            reason = "py-spy failed: " + seg["first_text"].removeprefix("Error: ") + (f" ({cause})" if cause else "")
            pid = int(previous_banner) if previous_banner else None
            bad.append((seg["first_line"], reason, seg["first_text"], subject_of(capture, pid)))
        elif seg["threads"] or seg["damaged_line"] is not None:
            # Thread or frame lines with no "Process" line above them: the head of a dump is missing.
            bad.append((seg["first_line"], "thread lines without a 'Process N:' line before them",
                        seg["first_text"], subject_of(capture)))
        previous_banner = seg["banner_pid"] if kind == "banner" else None
    frames = _frames(lines.filter(pl.col("segment").is_in(good_segments)), segments) if good_segments else None
    return pyspy.result(source_file, FORMAT, frames, contexts, bad)


def _frames(lines: pl.DataFrame, segments: pl.DataFrame) -> pl.DataFrame:
    """One row per frame of the good dumps (threads with no frames keep one row, depth null)."""
    g = pl.col("m").struct.field
    locals_ = (lines.filter(pl.col("kind") == "local")
               .join(lines.filter(pl.col("kind") == "locals_kind")
                     .select(pl.col("line").alias("locals_line"),
                             (g("locals_kind") == "Arguments").alias("arg")), on="locals_line", how="left")
               .group_by("frame_line")
               .agg(pl.struct(g("local_name").alias("name"), g("local_value").alias("value"), "arg")
                    .alias("locals")))
    threads = lines.filter(pl.col("kind") == "thread").select(
        "segment", pl.col("line").alias("thread_line"),
        pl.when(g("thread_id").str.starts_with("0x") | g("thread_id").str.starts_with("0X"))
        .then(g("thread_id").str.slice(2).str.to_integer(base=16, strict=False))
        .otherwise(g("thread_id").str.to_integer(strict=False)).alias("thread_id"),
        g("thread_name").alias("thread_name"),
        g("status").alias("status"),
    )
    frames = lines.filter(pl.col("kind") == "frame").select(
        "thread_line", pl.col("line").alias("frame_line"),
        g("function").alias("function"), g("file").alias("file"),
        g("lineno").cast(pl.Int32).alias("line"),
    ).with_columns((pl.col("frame_line").cum_count().over("thread_line") - 1).cast(pl.Int32).alias("depth"))
    frames = frames.join(locals_, on="frame_line", how="left")
    per_dump = segments.select(pl.col("segment"), "pid", "title", "python")
    return (threads.join(frames, on="thread_line", how="left")
            .join(per_dump, on="segment", how="left")
            .with_columns(pl.coalesce("frame_line", "thread_line").alias("source_line"),
                          pl.col("segment").cast(pl.Int32).alias("dump"))
            .sort("source_line"))


def parse(path: Path) -> ParseResult:
    """Read one py-spy text file."""
    data = read_all(path)
    return parse_text(bytes(data).decode("utf-8", "replace"), path)


register(NAME, sniff, parse, module=__name__)
