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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from forensics.sources.pyspy import dumps
from forensics.sources.common.snapshot_time import HEADER_PREFIX, Capture, from_path
from forensics.sources.pyspy.dumps import DumpContext, capture_of, subject_of
from forensics.sources.pyspy.paste import HEADERLESS_TITLE, NO_PID, frames_only, needs_normalizing, normalize
from forensics.sources.common.rawio import read_whole_lines
from forensics.sources.logs import server_log
from forensics.sources import ParseResult, register

NAME = "pyspy_text"
FORMAT = "pyspy:text"

#: The largest rank a process title may name (`TP`, `DP`, `PP` or `EP` and digits, as
#: `forensics.sources.pyspy.dumps.rank_expressions` reads them), far above any tensor-, data-, pipeline-
#: or expert-parallel group: the stacks detector expects every rank below a group's largest, so one
#: dump titled `sglang::scheduler_TP100000000` made it hold a hundred million missing ranks (out of
#: memory), and `TP99999999999` (past Int32) failed the whole ingest. Such a dump is quarantined.
MAX_TITLE_RANK = 65_535
_TITLE_RANKS = re.compile(r"(?:^|[^A-Za-z])(DP|TP|PP|EP)([0-9]+)")


def title_rank_refused(title: str | None) -> str | None:
    """Why a dump is not read for a rank its process title names past MAX_TITLE_RANK, or None."""
    for kind, digits in _TITLE_RANKS.findall(title or ""):
        if len(digits) > 10 or int(digits) > MAX_TITLE_RANK:  # (`int` reads no more than 4,300 digits)
            shown = digits if len(digits) <= 24 else f"{digits[:24]}… ({len(digits):,} digits)"
            return f"the process title names rank {kind}{shown}, over the largest a title may name ({MAX_TITLE_RANK:,})"
    return None


def untitled_subject(capture: Capture, pid: int | None = None) -> str | None:
    """The words naming a refused dump, without the title that was refused (the stacks detector
    reads a failed dump's rank from its title)."""
    words = [w for w in (subject_of(capture, pid) or "").split() if not w.startswith("title=")]
    return " ".join(words) or None

# Frame lines are ~95 % of a dump: found by one capture-free regex, then cut with string positions.
_FRAME = r"^    \S.* \([^()]*\)$"
_FRAME_PLACE = r" \([^()]*\)$"  # where "(file:line)" starts
_LINE_NUMBER = r":\d+$"
# Every other line: one alternation, one pass; which branch matched says what the line is.
_LINE = (
    r"^(?:"
    r"Process (?P<process_pid>\d+): (?P<process_title>.*)"
    r"|Python v(?P<python>\S+)(?: \(.*\))?"
    r"|Parent Process (?P<parent_pid>\d+): .*"
    r"|Signal (?P<signal>\d+): .*"
    r"|Thread (?P<thread_id>0[xX][0-9A-Fa-f]+|\d+)(?: \((?P<status>idle|active\+gil|active|gil)\))?"
    r"(?:: \"(?P<thread_name>.*)\")?"
    r"|        (?P<locals_kind>Arguments|Locals):"
    r"|            (?P<local_name>[^:\s]+): (?P<local_value>.*)"
    r"|Error: (?P<error>.*)"
    r"|(?P<header>" + re.escape(HEADER_PREFIX) + r".*)"
    r"|=+ *(?:pid)? *(?P<banner_pid>\d*) *=+"
    r")$"
)
# Lines that start the way py-spy's do: when such a line fails `_LINE`, it is a damaged dump line.
_PYSPY_START = r"^(?:Process \d|Python v|Thread |    |Signal \d)"
_SNIFF = re.compile(rb"(?m)^[ \t>]*(?:Process \d+: .*\n[ \t>]*(?:Python v|Parent|Thread )|Signal \d+: .*\n"
                    rb"Process \d+: |Thread (?:0[xX][0-9A-Fa-f]+|\d+) \((?:idle|active|active\+gil|gil)\))")
_ANSI_BYTES = re.compile(rb"\x1b\[[0-9;]*[A-Za-z]")
_SNIFF_FAILED = re.compile(rb"(?m)^(?:" + re.escape(HEADER_PREFIX.encode()) + rb"|Process \d+: |(?:sudo )?py-spy dump .*"
                           rb"--pid \d+).*\n(?:.*\n)*?Error: ")


def sniff(head: bytes, path: Path) -> bool:
    """py-spy text: a `Process N:` header followed by `Python v` (or, pasted, a thread line), a
    core dump's `Signal N:`, a thread line with py-spy's status words (indented or quoted too),
    or a capture header followed by py-spy's `Error:`, or frames alone (`broadcast (torch/…/x.py:12)` lines
    with no thread line); colour codes are looked through."""
    if path.is_dir():
        return False
    head = _ANSI_BYTES.sub(b"", head) if b"\x1b[" in head else head
    return bool(_SNIFF.search(head) or _SNIFF_FAILED.search(head) or frames_only(head.decode("utf-8", "replace")))


KINDS = pl.Enum(["frame", "process", "python", "parent", "signal", "thread", "locals_kind", "local", "error",
                  "header", "banner", "blank", "damaged", "noise"])


def _kind() -> pl.Expr:
    """What a line that is not a frame line is, from which branch of `_LINE` matched."""
    g = pl.col
    return (pl.when(g("process_pid").is_not_null()).then(pl.lit("process"))
            .when(g("python").is_not_null()).then(pl.lit("python"))
            .when(g("parent_pid").is_not_null()).then(pl.lit("parent"))
            .when(g("signal").is_not_null()).then(pl.lit("signal"))
            .when(g("thread_id").is_not_null()).then(pl.lit("thread"))
            .when(g("locals_kind").is_not_null()).then(pl.lit("locals_kind"))
            .when(g("local_name").is_not_null()).then(pl.lit("local"))
            .when(g("error").is_not_null()).then(pl.lit("error"))
            .when(g("header").is_not_null()).then(pl.lit("header"))
            .when(g("banner_pid").is_not_null()).then(pl.lit("banner"))
            .when(pl.col("text").str.strip_chars() == "").then(pl.lit("blank"))
            .when(pl.col("text").str.contains(_PYSPY_START)).then(pl.lit("damaged"))
            .otherwise(pl.lit("noise"))).cast(KINDS)


@dataclass
class Lines:
    """A text dump file cut into lines: `spine` has every line's number, kind and place (segment,
    latest header / thread / frame / locals heading); `frames` the frame lines' parts; `others`
    the other lines' text and fields. Frame lines keep no text: they are most of a big file."""

    spine: pl.DataFrame
    frames: pl.DataFrame
    others: pl.DataFrame


def classify(text: str) -> Lines:
    """Cut a dump file into lines and place each one."""
    # A file that ends without its newline is cut short only where its last line is not whole: a
    # dump's last frame line, "    f (file.py:12)", is complete though nothing follows it.
    last = text[text.rfind("\n") + 1:]
    cut = not text.endswith("\n") and re.fullmatch(_FRAME, last) is None
    lines = pl.Series("text", [text]).str.split("\n").explode().to_frame()
    if not cut:
        lines = lines.head(lines.height - 1)  # the empty string after the final newline
    lines = lines.with_row_index("line", offset=1)
    is_frame = pl.col("text").str.contains(_FRAME)
    text_ = pl.col("text")
    # str.find gives byte offsets, so the cutting is done on the bytes (every cut falls on ASCII).
    raw, at = pl.col("_raw"), pl.col("_at")
    frames = (lines.filter(is_frame)
              .select("line", text_.cast(pl.Binary).alias("_raw"), text_.str.find(_FRAME_PLACE).alias("_at"),
                      text_.str.len_bytes().alias("_n"))
              .with_columns(raw.bin.slice(4, at - 4).cast(pl.String).alias("function"),
                            raw.bin.slice(at + 2, pl.col("_n") - at - 3).alias("_raw"))
              .with_columns(raw.cast(pl.String).str.find(_LINE_NUMBER).alias("_at"))
              .with_columns(pl.when(at.is_null()).then(raw).otherwise(raw.bin.slice(0, at))
                            .cast(pl.String).alias("file"),
                            raw.bin.slice(at + 1).cast(pl.String).cast(pl.Int32, strict=False).alias("lineno"))
              .drop("_raw", "_at", "_n"))
    others = (lines.filter(~is_frame).with_columns(text_.str.extract_groups(_LINE).alias("m")).unnest("m")
              .with_columns(_kind().alias("kind")))
    del lines
    spine = pl.concat([others.select("line", "kind"),
                       frames.select("line", pl.lit("frame", KINDS).alias("kind"))]).sort("line")
    kind, line = pl.col("kind"), pl.col("line")
    # A dump starts at "Process" (unless a core dump's "Signal" line just started it), "Signal",
    # "Error", or a line that separates dumps (capture header, banner).
    starts = (kind.is_in(["signal", "error", "header", "banner"])
              | ((kind == "process") & (kind.shift(1) != "signal").fill_null(True)))

    def latest(k: str, reset: pl.Expr) -> pl.Expr:
        # The line of the latest `k` line, null again after each `reset` line: a forward fill over
        # contiguous runs, cheaper than a window per group.
        marked = pl.when(kind == k).then(line).when(reset).then(pl.lit(0, pl.UInt32)).forward_fill()
        return pl.when(marked > 0).then(marked)

    spine = spine.with_columns(starts.alias("_start"))
    start = pl.col("_start")
    spine = spine.with_columns(
        start.cast(pl.Int32).cum_sum().alias("segment"),
        latest("header", pl.lit(False)).alias("header_line"),
        latest("thread", start).alias("thread_line"),
        latest("frame", start | (kind == "thread")).alias("frame_line"),
        latest("locals_kind", start | kind.is_in(["thread", "frame"])).alias("locals_line"),
        pl.when(start).then(kind).forward_fill().fill_null(kind.first()).alias("segment_kind"),
        (pl.lit(cut) & (line == line.max())).alias("cut_line"),
    ).drop("_start")
    placed = ["line", "segment", "segment_kind", "thread_line", "frame_line", "locals_line"]
    return Lines(spine, frames.join(spine.select(placed), on="line"), others.join(spine.select(placed), on="line"))


def _segment_checks(lines: Lines) -> pl.DataFrame:
    """Per segment: what starts it, and what would spoil it as a dump."""
    kind = pl.col("kind")
    damaged = (kind == "damaged") | ((kind == "frame") & pl.col("thread_line").is_null())
    shape = lines.spine.group_by("segment", maintain_order=True).agg(
        pl.col("segment_kind").first().alias("kind"),
        pl.col("line").first().alias("first_line"),
        pl.col("header_line").first(),
        (kind == "thread").sum().alias("threads"),
        pl.col("line").filter(damaged).first().alias("damaged_line"),
        pl.col("cut_line").any().alias("cut"),
    )
    text = lines.others.group_by("segment").agg(
        pl.col("text").first().alias("first_text"),
        # a pid past Int64 is no process's (forged or damaged): read as none, as the JSON reader does
        pl.col("process_pid").drop_nulls().first().cast(pl.Int64, strict=False).alias("pid"),
        pl.col("process_title").drop_nulls().first().alias("title"),
        pl.col("python").drop_nulls().first().alias("python"),
        pl.col("banner_pid").first().alias("banner_pid"),
        pl.col("text").filter(kind == "damaged").first().alias("damaged_text"),
    )
    # py-spy's "Caused by:" lines under an Error are indented like frames: put them back as text.
    in_error = pl.col("segment_kind") == "error"
    frame_text = pl.concat_str(pl.col("function"), pl.lit(" ("), pl.col("file"),
                               pl.when(pl.col("lineno").is_not_null()).then(pl.format(":{}", "lineno")).otherwise(pl.lit("")),
                               pl.lit(")"))
    errors = (pl.concat([lines.others.filter(in_error & (kind != "blank")).select("segment", "line", "text"),
                         lines.frames.filter(in_error).select("segment", "line", frame_text.alias("text"))])
              .sort("line").group_by("segment").agg(pl.col("text").alias("error_text")))
    return shape.join(text, on="segment", how="left").join(errors, on="segment", how="left").with_columns(
        pl.col("first_text").fill_null(""), pl.col("damaged_text").fill_null("a frame line before any thread line"))


def _failure(seg: dict) -> str | None:
    """Why a dump segment cannot be read, or None when it can."""
    if seg["cut"]:
        return "dump cut short: the file ends in the middle of a line"
    if seg["damaged_line"] is not None:
        return f"line {seg['damaged_line']}: not a py-spy line: {seg['damaged_text'].strip()[:60]}"
    if seg["threads"] == 0:
        return "no threads in the dump"
    return None


def parse_text(text: str, source_file: str, fallback: Capture) -> ParseResult:
    """Every dump in one py-spy text file: frames of readable dumps, a quarantine row per other.
    `fallback` dates the dumps that have no capture header of their own. Text as people paste it
    is first put back into py-spy's layout (`forensics.sources.pyspy.paste`); rows keep the user's lines."""
    return read_dumps(text, source_file, fallback)[0]


def read_dumps(text: str, source_file: str, fallback: Capture) -> tuple[ParseResult, pl.Series]:
    """`parse_text`'s result, and the numbers of the text's lines the dumps hold (their headers,
    process, thread and frame lines): the others are no dump's."""
    notes: list[str] = []
    origin: list[int] | None = None
    if "\r" in text:  # a paste saved with Windows' line ends: the same lines, at the same numbers
        text = text.replace("\r\n", "\n")
    if needs_normalizing(text):
        pasted = normalize(text)
        text, origin, notes = pasted.text, pasted.origin, pasted.notes

    def at(line: int | None) -> int | None:
        return origin[line - 1] if origin is not None and line is not None else line

    lines = classify(text)
    segments = _segment_checks(lines).with_columns(
        pl.col("damaged_line").map_elements(at, return_dtype=pl.Int64) if origin is not None
        else pl.col("damaged_line"))
    header_text = dict(lines.others.filter(pl.col("kind") == "header").select("line", "text").iter_rows())
    contexts: list[DumpContext] = []
    bad: list[tuple[int | None, str, str, str | None]] = []
    good_segments: list[int] = []
    previous_banner: str | None = None
    previous_process: tuple[int | None, str | None] = (None, None)
    for seg in segments.iter_rows(named=True):
        capture = capture_of(fallback, header_text.get(seg["header_line"]))
        kind = seg["kind"]
        if kind in ("process", "signal"):
            why = _failure(seg)
            refused = title_rank_refused(_title(seg["title"]) or capture.labels.get("title")) if why is None else None
            if refused is not None:
                bad.append((at(seg["first_line"]), refused, seg["first_text"][:200],
                            untitled_subject(capture, seg["pid"] or None)))
            elif why is None:
                good_segments.append(seg["segment"])
                contexts.append(DumpContext(seg["segment"], capture))
            else:
                bad.append((at(seg["first_line"]), why, seg["first_text"], subject_of(capture, seg["pid"] or None,
                                                                                    _title(seg["title"]))))
        elif kind == "error":
            cause = " ".join(t.strip() for t in seg["error_text"][1:] if t.strip() and t.strip() != "Caused by:")
            reason = "py-spy failed: " + seg["first_text"].removeprefix("Error: ") + (f" ({cause})" if cause else "")
            pid, title = (int(previous_banner), None) if previous_banner else previous_process
            bad.append((at(seg["first_line"]), reason, seg["first_text"], subject_of(capture, pid, title)))
        elif seg["threads"] or seg["damaged_line"] is not None:
            # Thread or frame lines with no "Process" line above them: the head of a dump is missing.
            bad.append((at(seg["first_line"]), "thread lines without a 'Process N:' line before them",
                        seg["first_text"], subject_of(capture)))
        previous_banner = seg["banner_pid"] if kind == "banner" else None
        # py-spy's `Error:` right under a `Process N:` line with no threads is that process's failure
        previous_process = ((seg["pid"] or None, _title(seg["title"])) if kind == "process" and not seg["threads"]
                            else (None, None))
    frames = _frames(lines, segments, good_segments) if good_segments else None
    if frames is not None and origin is not None:
        lookup = pl.DataFrame({"source_line": range(1, len(origin) + 1), "_origin": origin},
                              schema={"source_line": frames.schema["source_line"], "_origin": pl.Int64})
        frames = (frames.join(lookup, on="source_line", how="left", maintain_order="left")
                  .with_columns(pl.col("_origin").cast(frames.schema["source_line"]).alias("source_line"))
                  .drop("_origin"))
    result = dumps.result(source_file, FORMAT, frames, contexts, bad)
    result.notes = notes
    held = lines.spine.filter(~pl.col("kind").is_in(["noise", "blank"])).get_column("line").cast(pl.Int64)
    if origin is not None:  # numbered as the user's text numbers them
        held = pl.Series(origin, dtype=pl.Int64).gather(held - 1)
    return result, held


def log_lines(text: str, held: pl.Series) -> str:
    """`text` with the lines the dumps hold (`held`) blank: what is left for a log's reader, each
    line at its own number."""
    lines = pl.DataFrame({"text": text.split("\n")}, schema={"text": pl.String}).with_row_index("line", 1)
    kept = lines.select(pl.when(pl.col("line").cast(pl.Int64).is_in(held.implode())).then(pl.lit(""))
                        .otherwise(pl.col("text"))).to_series()
    return "\n".join(kept.to_list())


def _title(title: str | None) -> str | None:
    """A process title as read; None for the head-less processes `forensics.sources.pyspy.paste` made."""
    return None if title == HEADERLESS_TITLE else title


def _frames(lines: Lines, segments: pl.DataFrame, good: list[int]) -> pl.DataFrame:
    """One row per frame of the good dumps (threads with no frames keep one row, depth null)."""
    g = pl.col
    others = lines.others.filter(g("segment").is_in(good))
    locals_ = (others.filter(g("kind") == "local")
               .join(others.filter(g("kind") == "locals_kind")
                     .select(g("line").alias("locals_line"), (g("locals_kind") == "Arguments").alias("arg")),
                     on="locals_line", how="left")
               .group_by("frame_line")
               .agg(pl.struct(g("local_name").alias("name"), g("local_value").alias("value"), "arg")
                    .alias("locals")))
    threads = others.filter(g("kind") == "thread").select(
        "segment", g("line").alias("thread_line"),
        pl.when(g("thread_id").str.starts_with("0x") | g("thread_id").str.starts_with("0X"))
        .then(g("thread_id").str.slice(2).str.to_integer(base=16, strict=False))
        .otherwise(g("thread_id").str.to_integer(strict=False)).alias("thread_id"),
        "thread_name", "status",
    )
    frames = (lines.frames.filter(g("segment").is_in(good))
              .select("thread_line", g("line").alias("frame_line"), "function", "file", g("lineno").alias("line"))
              .with_columns(pl.int_range(pl.len()).over("thread_line").cast(pl.Int32).alias("depth"))
              .join(locals_, on="frame_line", how="left"))
    per_dump = segments.select(
        "segment", pl.when(pl.col("pid") != NO_PID).then(pl.col("pid")).alias("pid"),
        pl.when(pl.col("title") != HEADERLESS_TITLE).then(pl.col("title")).alias("title"),
        pl.when(pl.col("python") != "?").then(pl.col("python")).alias("python"))
    return (threads.join(frames, on="thread_line", how="left")
            .join(per_dump, on="segment", how="left")
            .with_columns(pl.coalesce("frame_line", "thread_line").alias("source_line"),
                          g("segment").cast(pl.Int32).alias("dump"))
            .sort("source_line"))


def parse(path: Path) -> ParseResult:
    """Read one py-spy text file's dumps."""
    data, damage = read_whole_lines(path)
    result = parse_text(bytes(data).decode("utf-8", "replace"), str(path), from_path(path))
    result.damage = damage
    return result


def stream(path: Path) -> Iterator[ParseResult]:
    """A py-spy text file's dumps (`parse`), then the log lines between them, read as a server's
    log is (`forensics.sources.logs.server_log`): each line by the reader of its kind."""
    data, damage = read_whole_lines(path)
    text = bytes(data).decode("utf-8", "replace")
    dumps_read, held = read_dumps(text, str(path), from_path(path))
    dumps_read.damage = damage
    yield dumps_read
    read = server_log.parse_text(log_lines(text, held), path)
    if read.rows.height == read.rows.get_column("ts").null_count():
        return  # no stamped log line between the dumps: what is there is noise (prompts, `ps`, banners)
    # the blanked dump lines are no lines the log reader passed over: not said as such
    read.notes = ["the lines between the dumps read as a server's log", *(n for n in read.notes if "passed over" not in n)]
    yield read


register(NAME, sniff, parse, module=__name__, stream=stream)
