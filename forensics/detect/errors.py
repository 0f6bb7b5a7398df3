"""Errors: the profile's notable line kinds, tracebacks folded into one event, and message
templates (numbers, ids, hex, paths masked) counted per minute, with the ones that are new in
the incident window compared with the baseline before it."""

from __future__ import annotations

import re

from datetime import datetime, timedelta

import polars as pl

from forensics.timeline.align import Timeline
from forensics.detect import Finding, between, clock, earliest, event_evidence, excerpt, kind_sentence, latest_time, one_unit
from forensics.detect.registry import Context, detector

# Masks applied in order: what varies between two lines of the same template.
MASKS = (
    (r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", "<uuid>"),
    (r"\b0x[0-9a-fA-F]+\b|\b[0-9a-f]{12,}\b", "<hex>"),
    (r"(?:/[\w.\-]+)+", "<path>"),
    (r"\b\d+\.\d+\.\d+\.\d+(?::\d+)?\b", "<ip>"),
    (r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d+)?", "<time>"),
    (r"[-+]?\b\d+(?:\.\d+)?\b", "<n>"),
)
# Where a record holds a traceback's first line: at its start (a journal line), after a prefix the
# same line carries (SGLang's "Scheduler hit an exception: Traceback …"), or on a later line of a
# record a log reader folded ("[…] Exception in ASGI application" then the traceback).
TRACEBACK_START = r"Traceback \(most recent call last\):"
# A traceback's last word: `module.Name: message` (or a bare `…Error`) at the line's start.
EXCEPTION_LINE = r"^[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Failure)\b|^[A-Za-z_][\w.]*: "
WARNING = 4  # syslog priority: warning and worse
# How long an engine's own watchdog waited without progress before it spoke: SGLang's
# "Watchdog timeout (self.watchdog_timeout=300)", vLLM's "No available shared memory broadcast block
# found in 60 seconds"
WAITED = re.compile(r"watchdog_timeout=(?P<a>[0-9]+(?:\.[0-9]+)?)|found in (?P<b>[0-9]+(?:\.[0-9]+)?) seconds")


#: The kinds whose lines say how long an engine waited: SGLang's watchdog counts its scheduler's own
#: progress (a stall); vLLM's wait for its workers may be a hang or a compilation (a wait)
STALLS = {"watchdog_timeout": "without progress", "engine_wait_timeout": "waiting on its workers"}


def stalled(rows: pl.DataFrame, kind: str = "watchdog_timeout") -> tuple[str, dict[str, object]]:
    """What an engine's watchdog lines say of its stall (or wait, `STALLS`), in words and as facts:
    how long it counted, the time that puts its start at (the first line's time less that), and
    the scheduler tags that said it. Nothing where the lines do not say how long, or say a time
    before any calendar's."""
    first = rows.row(0, named=True)
    waited = WAITED.search(first["message"] or "")
    if waited is None or first["ts"] is None:
        return "", {}
    seconds = float(waited["a"] or waited["b"])
    try:
        since = first["ts"] - timedelta(seconds=seconds)
    except (OverflowError, ValueError):  # a forged or mistyped timeout: no start is implied
        return "", {"waited_s": seconds}
    tags = sorted({t for t in rows.get_column("tag").cast(pl.String).to_list() if t},
                  key=lambda t: [int(p) if p.isdigit() else p for p in re.split(r"([0-9]+)", t)]) \
        if "tag" in rows.columns else []
    facts: dict[str, object] = {"waited_s": seconds, "stalled_since": since.isoformat(), **({"tags": tags} if tags else {})}
    by = f" ({', '.join(tags)})" if tags else ""
    what = "stalled" if kind == "watchdog_timeout" else "waiting"
    return (f" The engine's own watchdog{by} counted {seconds:g} s {STALLS[kind]} before it: {what} since about "
            f"{clock(since)}."), facts


def raised_line(message: str) -> tuple[str, bool]:
    """What a record that holds a traceback says it raised: its last exception-shaped line (else its
    last line; a record without a traceback, its first line), and whether the traceback begins past
    the record's second line (printed at the record's time or later: those lines carry no time)."""
    lines = [line for line in message.splitlines() if line.strip()] or [""]
    begins = next((n for n, line in enumerate(lines) if re.search(TRACEBACK_START, line)), None)
    if begins is None:
        return lines[0], False
    raised = [line for line in lines if re.search(EXCEPTION_LINE, line)]
    return (raised or lines)[-1], begins > 1


def template(message: pl.Expr) -> pl.Expr:
    """A message with its variable parts masked."""
    for pattern, mask in MASKS:
        message = message.str.replace_all(pattern, mask)
    return message


def fold_tracebacks(events: pl.DataFrame) -> pl.DataFrame:
    """Multi-line Python tracebacks (one journal record per line) folded into one row per
    traceback: the lines of one process from `Traceback (most recent call last):` to the
    exception line, joined, at the first line's time."""
    kept = ("ts", "host", "pid", "component", "unit", "source_file", "source_line", "source_offset", "message")
    lines = events.lazy().select(kept).with_columns(pl.col("message").str.contains(TRACEBACK_START).alias("_start"))
    # only the processes that printed a traceback are sorted and walked
    printed = lines.filter(pl.col("_start")).select("host", "pid").unique()
    lines = (lines.join(printed, on=["host", "pid"], how="semi", nulls_equal=True)
             .sort("ts", maintain_order=True).collect())
    lines = lines.with_columns(pl.col("_start").cast(pl.Int32).cum_sum().over("host", "pid").alias("_tb"))
    inside = lines.filter(pl.col("_tb") > 0).with_columns(
        (pl.col("_start") | pl.col("message").str.contains(r"^\s") |
         pl.col("message").str.contains(r"^\w[\w.]*(?:Error|Exception|Interrupt|Exit)\b")).fill_null(False)
        .alias("_part"))
    # a traceback ends at its first line that is not part of it
    inside = inside.with_columns((~pl.col("_part")).cast(pl.Int32).cum_sum().over("host", "pid", "_tb").alias("_out"))
    tracebacks = inside.filter(pl.col("_out") == 0)
    # a server log's record may hold the whole traceback already: lines and exception from the text
    folded = (tracebacks.group_by("host", "pid", "_tb", maintain_order=True)
              .agg(pl.col("ts").first(), pl.col("component").first(), pl.col("unit").first(),
                   pl.col("source_file").first(), pl.col("source_line").first(), pl.col("source_offset").first(),
                   pl.col("message").str.join("\n"))
              .drop("_tb"))
    text = pl.col("message").str.split("\n").list.eval(pl.element().filter(pl.element().str.strip_chars() != ""))
    # the exception is the last line shaped like one ("RuntimeError: …"), not whatever a harness
    # printed after it ("Finished test case …"); a traceback that begins past a record's second line
    # follows lines of no time of their own: it was printed at that record's time or later
    raised = text.list.eval(pl.element().filter(pl.element().str.contains(EXCEPTION_LINE))).list.last()
    begins = text.list.eval(pl.element().str.contains(TRACEBACK_START)).list.arg_max()
    return folded.with_columns(pl.coalesce(raised, text.list.last()).alias("exception"),
                               text.list.len().cast(pl.UInt32).alias("lines"), (begins > 1).alias("time_is_after"))


def _notable(events: pl.DataFrame, include_events: bool) -> pl.DataFrame:
    """Warning-and-worse lines (and the profile's line kinds unless told not to), with their template."""
    kinds = pl.col("event").is_not_null()
    wanted = ((pl.col("priority") <= WARNING) | kinds) if include_events else (pl.col("priority") <= WARNING) & ~kinds
    notable = events.select("ts", "component", "priority", "event", "track", "message").filter(wanted)
    return notable.with_columns(template(pl.col("message")).alias("template"))


def per_minute(timeline: Timeline) -> pl.DataFrame:
    """Warning-and-worse lines and the profile's line kinds counted per minute, component and
    template (minutes without such a line have no row)."""
    return (_notable(timeline.events, True)
            .group_by(pl.col("ts").dt.truncate("1m").alias("minute"), "component", "template")
            .agg(pl.len().alias("count"), pl.col("event").drop_nulls().first(), pl.col("track").drop_nulls().first())
            .sort("minute", "component", "template"))


def templates(timeline: Timeline, start: datetime, *, include_events: bool = True) -> pl.DataFrame:
    """Warning-and-worse lines (and, unless told not to, the profile's line kinds) by template:
    count, first, last, per-minute peak, and whether the template is new since `start`."""
    return (_notable(timeline.events, include_events)
            .group_by("component", "template")
            .agg(pl.len().alias("count"), pl.col("ts").min().alias("first"), pl.col("ts").max().alias("last"),
                 pl.col("ts").dt.truncate("1m").value_counts().struct.field("count").max().alias("peak_per_minute"),
                 pl.col("event").drop_nulls().first(), pl.col("track").drop_nulls().first())
            .with_columns((pl.col("first") >= start).alias("new_in_window"))
            .sort("first"))


def detect(timeline: Timeline, window_start: datetime | None = None) -> list[Finding]:
    """A finding per notable line kind (count and span), per folded traceback, and per template
    new in the incident window (from `window_start`)."""
    events = timeline.events
    # Only the columns the findings quote are filtered (the events frame is wide).
    line = events.select("ts", "component", "unit", "event", "track", "http_status", "source_file", "source_line",
                         "source_offset", "message", *(["tag"] if "tag" in events.columns else []))
    findings = []
    # the layers' line kinds (PyTorch distributed, kernel, systemd) have a detector of their own
    layered = [e.kind for e in timeline.profile.logs.events if e.layer is not None]
    for (kind, track, component), rows in line.filter(pl.col("event").is_not_null() & ~pl.col("event").is_in(layered)
                                                      ).sort("ts").group_by(
            "event", "track", "component", maintain_order=True):
        event = next((e for e in timeline.profile.logs.events if e.kind == kind), None)
        first, last = earliest(rows.get_column("ts")), latest_time(rows.get_column("ts"))
        said, facts = stalled(rows, str(kind)) if kind in STALLS else ("", {})
        findings.append(Finding(str(kind), str(track), component, first,
                                kind_sentence(rows, event.text if event is not None else str(kind),
                                              component or one_unit(rows) or "the host",
                                              event.pattern if event is not None else None) + said,
                                last, event_evidence(rows), facts=facts))
    server_errors = line.filter(pl.col("http_status") >= 500).sort("ts")
    for (component,), rows in server_errors.group_by("component", maintain_order=True):
        first, last = earliest(rows.get_column("ts")), latest_time(rows.get_column("ts"))
        statuses = ", ".join(f"{s} × {n}" for s, n in rows.group_by("http_status").len().sort("http_status").rows())
        findings.append(Finding("http_5xx", timeline.profile.logs.main_track, component, first,
                                f"{rows.height} HTTP 5xx answers from {component or one_unit(rows) or 'the host'} "
                                f"({statuses}), "
                                f"{between(first, last)}.", last, event_evidence(rows)))
    for tb in fold_tracebacks(events).iter_rows(named=True):
        pid = f"pid {tb['pid']}, " if tb["pid"] else ""
        when = f"; printed at {clock(tb['ts'])} or later: its lines carry no time of their own" if tb["time_is_after"] else ""
        findings.append(Finding("traceback", "errors", tb["component"], tb["ts"],
                                f"traceback in {tb['component'] or tb['unit']} ({pid}{tb['lines']} lines{when}): "
                                f"{tb['exception']}", None,
                                event_evidence(pl.DataFrame([tb]).rename({"message": "message"}), 1)))
    if window_start is not None:
        baseline_start = window_start - timedelta(minutes=1)
        # line kinds have findings of their own above: only the other lines' templates here
        new = templates(timeline, baseline_start, include_events=False).filter(pl.col("new_in_window"))
        for row in new.iter_rows(named=True):
            findings.append(Finding("new_template", row["track"] or "errors", row["component"], row["first"],
                                    f"new in the incident window: {row['count']} × “{excerpt(row['template'], 100)}” "
                                    + (f"on {row['component']} " if row["component"] else "")
                                    + f"({clock(row['first'])}–{clock(row['last'])}).",
                                    row["last"], []))
    return findings


@detector("errors")
def run(ctx: Context) -> list[Finding]:
    """Error lines and new templates from the incident's start on."""
    return detect(ctx.timeline, ctx.times.started if ctx.times else None)
