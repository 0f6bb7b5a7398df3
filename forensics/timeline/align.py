"""One timeline on true UTC: the one place that decides `ts`.

- Each host's known clock offset (incident.toml `clock_offset_s`, host clock minus true time) is
  taken off every source from that host: journald's realtime stamps, scrape capture times, dump
  capture times.
- Log lines carry their own stamp in the host's local time without a zone (SGLang's
  `[2026-06-18 21:34:47 TP0]`, with or without milliseconds): read in the host's zone from the
  manifest, offset removed, kept as `line_ts` beside journald's `ts`. Their difference per host is
  an estimate of how well the two agree (`clock_checks`): near zero when zone and offset are right;
  a whole number of hours means a wrong time zone; anything else an unknown skew.
- A host whose offset the manifest does not give gets one estimated from requests seen on two
  hosts: the same request id leaving a router (profile `request_sent`) and arriving at an engine on
  another host (`request_received`), or arriving at engines on two hosts at once (SGLang's
  prefill/decode pairs: the router sends each request to both together, and both log its
  bootstrap room). The median difference of the two hosts' stamps is their clock difference plus
  the network latency, or the difference of two latencies (milliseconds, not subtracted); the
  interquartile range is reported as its uncertainty. Estimates hang off hosts whose offset is
  known.
- Within one boot, journald's monotonic clock never jumps: where realtime minus monotonic changes
  by more than `JUMP_S` between consecutive records, the wall clock was stepped (`clock_jumps`),
  and the analysis says so rather than trusting the order of the wall-clock times.
- Storage is always UTC; the display zone is the renderer's parameter.

The events are read host by host (`read_host`, one task per host folder of the case, run in this
process or on a Dask cluster): each task reads its host's lines with the profile and returns them
with the small results that need every line of the host (lines per minute and lane, the log-stamp
skew, clock steps, pauses per source), which are combined here once the hosts' offsets are known.

A big case (over LEAN_ABOVE records) gets a lean timeline, so that memory follows what the
detectors read rather than the size of the logs: each host is read in batches and only the lines
worth a finding are kept (warnings and worse, the profile's line kinds, systemd's and sudo's
lines, health checks and access lines, tracebacks: with their text), and the progress lines (their
numbers, not their text); routine lines are only counted (`Timeline.activity`). A text that a
finding quotes is fetched back from the case (`Timeline.with_messages`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

import polars as pl

from forensics.case import cluster
from forensics.case.build import Case
from forensics.case.cluster import Progress, Runner
from forensics.case.incident import Incident
from forensics.case.places import location, place_text
from forensics.case.store import partition_rows, scan_partition
from forensics.formats.frames import columns_of_frame, cut_alike, replace_columns
from forensics.profiles import Profile
from forensics.sources.kubectl import K8S_COLUMNS
from forensics.timeline.logs import read_lines
from forensics.timeline.progress import (
    LINE,
    count_progress,
    host_progress,
    own_ends,
    progress_of,
)

STAMP_FORMATS = ("%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%d %H:%M:%S")
PLAIN_LOG = "log:line"
PLAUSIBLE_MARGIN = timedelta(days=1)  # how far outside the incident a record's time may still lie  # the data_type of plain-text server log records
JUMP_S = 1.0  # a wall-clock step smaller than this is indistinguishable from logging delays
#: The columns of `events` the detectors read (the rest stay in the case for whoever digs further).
EVENT_COLUMNS = ("ts", "__REALTIME_TIMESTAMP", "__MONOTONIC_TIMESTAMP", "_BOOT_ID", "host", "unit", "identifier",
                 "pid", "priority", "message_id", "invocation_id", "message", "data_type", "source_file",
                 "source_offset", "source_line")
#: Fields some readers add that detectors read too, kept where the case has them: the rank torch
#: prefixes a line with, the Flight Recorder's entries (`forensics.detect.collectives`) and kubectl's
#: objects and numbers (`forensics.sources.kubectl`).
DETECTOR_EXTRAS = ("LOG_RANK", "FR_RANK", "FR_JOB", "FR_DUMPED_AT", "FR_PG", "FR_PG_DESC", "FR_PG_RANKS",
                   "FR_SEQ", "FR_P2P", "FR_OP", "FR_STATE", "FR_INPUT_SIZES", "FR_LAST_ENQUEUED", "FR_LAST_STARTED",
                   "FR_LAST_COMPLETED", "FR_FINDING", "FR_MISSING", "FR_EXPECTED", "FR_ERRORS", "FR_MISSING_DUMPS",
                   "FR_WORLD_SIZE", "LOG_ZONE", *K8S_COLUMNS)


def _event_columns(available: list[str]) -> list[str]:
    """The columns of `events` the timeline reads, of those `available`."""
    return [*EVENT_COLUMNS, *(c for c in DETECTOR_EXTRAS if c in available)]


# what a line is counted by in `Timeline.activity` (its lane: host, component or unit, ranks)
ACTIVITY_KEYS = ("host", "component", "identifier", "unit", "line_dp", "line_pp", "line_tp")
GAP_FACTOR = 5.0  # a pause this many times a source's median interval (and over GAP_MIN_S) is a gap
GAP_MIN_S = 60.0
LEAN_ENV = "FORENSICS_LEAN_ABOVE"  # records above which the timeline is lean (default 2 M; 0: always)
LEAN_ABOVE = int(os.environ.get(LEAN_ENV) or 2_000_000)
LEAN_BATCH_ROWS = 100_000  # records read with the profile at a time when lean
# A host's records are read this many slices at once (the cores this process may run on: a regular expression
# over one column runs on one core): rows held in memory in as many slices, when there are at
# least HELD_SLICE_ABOVE of them (fewer are read faster whole); a lean timeline's batches this many
# at a time, so that its memory stays bounded by them.
SLICES_AT_ONCE, HELD_SLICE_ABOVE = max(1, len(os.sched_getaffinity(0))), 200_000
# In a lean timeline: the progress fields the detectors read (others stay in the case), the
# columns of the reading held as categories (few distinct values, long ones; the case's identifiers
# are categories already: `EVENTS_SCHEMA`), and those left out.
LEAN_FIELDS = ("running_req", "queue_req", "inflight_req")
LEAN_CATEGORIES = ("tag", "progress", "event", "track", "component")
LEAN_RANKS = ("line_dp", "line_tp", "line_pp", "line_ep")  # Int16 (a rank is below 32768)
LEAN_DROPPED = ("invocation_id", "stamp")
# text on few lines, cut out of each batch's messages (copied out: see `_kept_text`)
LEAN_SPARSE_TEXT = ("message", "message_id", "rid_sent", "rid_received", "http_method", "http_path")
# lines whose text a detector reads although no profile rule names them: tracebacks, systemctl
# Two searches, not one alternation: a pattern anchored at the line's start stops at its first
# bytes, while one unanchored branch (`systemctl`) made the regex engine read every line whole
# (5× slower over a million lines).
NOTABLE_START = r"^(?:\s|Traceback |\w[\w.]*(?:Error|Exception|Interrupt|Exit)\b)"
NOTABLE_WORD = "systemctl"


@dataclass
class Timeline:
    """The case's frames on true UTC, with components, plus what the alignment measured."""

    events: pl.DataFrame  # events + the profile's reading of each line + component + line_ts
    samples: pl.LazyFrame
    stacks: pl.DataFrame
    quarantine: pl.DataFrame
    clock_checks: pl.DataFrame  # per host: offset applied and its source, log-stamp vs journald median and spread
    request_pairs: pl.DataFrame  # requests seen on two hosts: what the estimated offsets rest on
    jumps: pl.DataFrame  # wall-clock steps found with the monotonic clock
    incident: Incident
    profile: Profile
    manifest: dict
    offsets: dict[str, float]  # each host's clock offset taken off, seconds
    # every line counted per minute and lane (ACTIVITY_KEYS), with the first and last time: what
    # the figures and the own-end of each component read, whether the lines are held or not
    activity: pl.DataFrame
    source_gaps: pl.DataFrame  # pauses in each journal source (`gaps_in_sources`)
    # found host by host, over every progress line (`forensics.timeline.progress.host_progress`):
    progress_streams: pl.DataFrame  # per scheduler: lines, first, last, pending at the last
    progress_gaps: pl.DataFrame  # gaps over the freeze threshold with work pending
    progress_counts: pl.DataFrame  # progress lines per second and lane
    # records whose time lies far outside the incident (a forged or damaged stamp, a clock reset
    # to 1970): kept out of every detector, listed per source in data quality
    out_of_range: pl.DataFrame | None = None
    case: Case | None = None  # where a lean timeline fetches the text of the lines it quotes
    lean: bool = False  # routine lines left out (see the module's docstring)

    def placed(self, rows: pl.DataFrame) -> pl.DataFrame:
        """Records of the case (`rows`, its columns) read onto this timeline as its own lines are:
        the profile's reading, component, and true time; in time order. For the few records a
        lean timeline only counts."""
        columns = _event_columns(rows.columns)
        read = [_read_batch(part, part.get_column("host")[0], self.incident, self.profile)
                for part in rows.select(columns).partition_by("host", maintain_order=True)]
        if not read:
            read = [_read_batch(rows.select(columns), None, self.incident, self.profile)]
        return (pl.concat(read, how="vertical_relaxed")
                .with_columns(_true_time(self.offsets))
                .sort("ts", maintain_order=True))

    @property
    def first_ts(self) -> datetime | None:
        """The time of the timeline's first line."""
        return self.activity.get_column("first").min()  # type: ignore[return-value]

    @property
    def last_ts(self) -> datetime | None:
        """The time of the timeline's last line."""
        return self.activity.get_column("last").max()  # type: ignore[return-value]

    @property
    def hosts(self) -> list[str | None]:
        """The hosts with lines on the timeline (None: lines that name none)."""
        return self.activity.get_column("host").unique().to_list()

    def with_messages(self, rows: pl.DataFrame) -> pl.DataFrame:
        """`rows` of `events` with their `message` (a lean timeline keeps the text of notable
        lines only: the others' is read back from the case by file and place)."""
        if not self.lean or self.case is None or rows.is_empty() or rows.get_column("message").null_count() == 0:
            return rows
        keys = ("source_file", "source_offset", "source_line")
        wanted = rows.select(pl.col("source_file").cast(pl.String), "source_offset", "source_line").unique()
        files = wanted.get_column("source_file").unique().implode()
        offsets = wanted.get_column("source_offset")
        # row groups of other files, and of places none of the rows is at, skipped by their statistics
        at = pl.col("source_offset").is_in(offsets.drop_nulls().implode())
        at = at | pl.col("source_offset").is_null() if offsets.null_count() else at
        found = (self.case.events.filter(pl.col("source_file").is_in(files) & at)
                 .select(pl.col("source_file").cast(pl.String), "source_offset", "source_line",
                         pl.col("message").alias("_text"))
                 .join(wanted.lazy(), on=list(keys), how="semi", nulls_equal=True).collect()
                 .unique(list(keys), keep="first"))
        joined = rows.with_columns(pl.col("source_file").cast(pl.String).alias("_file")).join(
            found.rename({"source_file": "_file"}), on=["_file", "source_offset", "source_line"], how="left",
            nulls_equal=True, maintain_order="left")
        return joined.with_columns(pl.coalesce("message", "_text").alias("message")).drop("_file", "_text")


def _offset_us(offsets_s: dict[str, float], host: pl.Expr) -> pl.Expr:
    """Each row's host clock offset in microseconds (0 for hosts without one)."""
    offsets = {name: round(seconds * 1e6) for name, seconds in offsets_s.items()}
    return host.replace_strict(offsets, default=0, return_dtype=pl.Int64) if offsets else pl.lit(0, pl.Int64)


def request_pairs(events: pl.DataFrame) -> pl.DataFrame:
    """Per (sender host, receiver host): requests seen on both, and the median and interquartile
    range of receiver stamp minus sender stamp, in seconds (each on its own host's clock). A
    request received on two hosts (and sent from neither) pairs them too, the host of lower name
    as the sender."""
    lines = events.lazy()  # lazily: each filter copies the three columns it keeps, not every one
    host = pl.col("host").cast(pl.String)
    sent = lines.filter(pl.col("rid_sent").is_not_null()).select(host, pl.col("rid_sent").alias("rid"), "ts")
    received = lines.filter(pl.col("rid_received").is_not_null()).select(
        host.alias("receiver"), pl.col("rid_received").alias("rid"), pl.col("ts").alias("ts_received"))
    both = (received.rename({"receiver": "host", "ts_received": "ts"}).join(received, on="rid")
            .filter(pl.col("host") < pl.col("receiver")))
    diff = (pl.col("ts_received") - pl.col("ts")).dt.total_microseconds() / 1e6
    return (pl.concat([sent.join(received, on="rid").filter(pl.col("host") != pl.col("receiver")), both])
            .group_by(pl.col("host").alias("sender"), "receiver")
            .agg(diff.median().alias("median_s"), (diff.quantile(0.75) - diff.quantile(0.25)).alias("iqr_s"),
                 pl.len().alias("requests"))
            .sort("sender", "receiver").collect())


def estimate_offsets(pairs: pl.DataFrame, hosts: list[str], incident: Incident) -> dict[str, tuple[float, str]]:
    """Every host's offset (seconds) and where it came from: declared in the manifest, estimated
    from request pairs with a host already placed, or assumed 0."""
    placed: dict[str, tuple[float, str]] = {}
    for host in hosts:
        declared = incident.clock(host).clock_offset_s
        if declared is not None:
            placed[host] = (declared, "declared")
    changed = True
    while changed:  # walk out from the placed hosts, one request pair at a time
        changed = False
        for row in pairs.iter_rows(named=True):
            sender, receiver, median, iqr = row["sender"], row["receiver"], row["median_s"], row["iqr_s"]
            how = (f"estimated ±{iqr / 2 * 1000:.1f} ms from {row['requests']:,} requests seen on both hosts "
                   "(network latency not subtracted)")
            if receiver in placed and sender not in placed:
                placed[sender] = (placed[receiver][0] - median, how + f" with {receiver}")
                changed = True
            elif sender in placed and receiver not in placed:
                placed[receiver] = (placed[sender][0] + median, how + f" with {sender}")
                changed = True
    for host in hosts:
        placed.setdefault(host, (0.0, "assumed 0 (not declared, no requests shared with a known host)"))
    return placed


def _steps(clocks: pl.DataFrame) -> pl.DataFrame:
    """Within one (host, boot) — `_row`, `__REALTIME_TIMESTAMP`, `__MONOTONIC_TIMESTAMP` of its
    rows — the rows after a wall-clock step (`_row`), the rows before them (`_before`) and the
    steps in seconds (`jump_s`), in monotonic order. One query: only the few steps are kept."""
    mono = clocks.get_column("__MONOTONIC_TIMESTAMP")
    if not mono.is_sorted():
        clocks = clocks.sort("__MONOTONIC_TIMESTAMP", maintain_order=True)
    drift = pl.col("__REALTIME_TIMESTAMP") - pl.col("__MONOTONIC_TIMESTAMP")
    step = drift - drift.shift(1)
    return (clocks.lazy().select("_row", pl.col("_row").shift(1).alias("_before"), step.alias("_step"))
            .filter(pl.col("_step").abs() > JUMP_S * 1e6)
            .select("_row", "_before", (pl.col("_step") / 1e6).alias("jump_s")).collect())


# a host's log-line stamps minus journald's times: median, 5th-95th percentile spread, lines compared
SKEW_SCHEMA = {"host": pl.String, "line_minus_journal_s": pl.Float64, "spread_s": pl.Float64, "lines": pl.UInt32}
JUMPS_SCHEMA = {"host": pl.String, "_BOOT_ID": pl.String, "before": pl.Datetime("us", "UTC"),
                "after": pl.Datetime("us", "UTC"), "jump_s": pl.Float64, "message_before": pl.String,
                "message": pl.String, "source_file": pl.String, "source_offset": pl.Int64, "source_line": pl.Int64}


def _step_places(clocks: pl.DataFrame) -> pl.DataFrame:
    """Of `clocks` (`_row`, host, `_BOOT_ID`, `__REALTIME_TIMESTAMP`, `__MONOTONIC_TIMESTAMP`): the
    wall-clock steps per host and boot, as `_row` (the record after), `_before` and `jump_s`."""
    clocked = (pl.col("__REALTIME_TIMESTAMP").is_not_null() & pl.col("__MONOTONIC_TIMESTAMP").is_not_null()
               & pl.col("_BOOT_ID").is_not_null())
    one_run = clocks.select(clocked.all() & (pl.col("host").n_unique() == 1)
                            & (pl.col("_BOOT_ID").n_unique() == 1)).item()
    # one journal of one boot (the usual host) is not split into per-run copies
    runs = [clocks] if one_run else clocks.filter(clocked).partition_by("host", "_BOOT_ID", maintain_order=True)
    steps = [_steps(run.select("_row", "__REALTIME_TIMESTAMP", "__MONOTONIC_TIMESTAMP")) for run in runs if run.height]
    return (pl.concat(steps) if steps else
            pl.DataFrame(schema={"_row": clocks.schema["_row"], "_before": clocks.schema["_row"], "jump_s": pl.Float64}))


def _jumps_table(found: pl.DataFrame, before: pl.DataFrame, after: pl.DataFrame) -> pl.DataFrame:
    """The clock steps `found` as the timeline lists them, from the records before and after each."""
    return pl.DataFrame([
        after.get_column("host").cast(pl.String), after.get_column("_BOOT_ID").cast(pl.String),
        before.get_column("ts").alias("before"), after.get_column("ts").alias("after"), found.get_column("jump_s"),
        before.get_column("message").alias("message_before"), after.get_column("message"),
        after.get_column("source_file").cast(pl.String), after.get_column("source_offset"),
        after.get_column("source_line")]).cast(JUMPS_SCHEMA)  # type: ignore[arg-type]


def clock_jumps(events: pl.DataFrame) -> pl.DataFrame:
    """Per host and boot, in monotonic order: where the wall clock stepped (realtime minus monotonic
    changed by more than JUMP_S), by how much, and the records either side."""
    clocks = events.select(pl.int_range(pl.len(), dtype=pl.UInt32).alias("_row"), "host", "_BOOT_ID",
                           "__REALTIME_TIMESTAMP", "__MONOTONIC_TIMESTAMP")
    found = _step_places(clocks)
    return _jumps_table(found, events[found.get_column("_before")], events[found.get_column("_row")])


def _line_ts(events: pl.DataFrame, incident: Incident, offsets: dict[str, float]) -> pl.Series:
    """The log-line stamps (`line_local`, naive) as true UTC, read in each host's zone, the host's
    offset taken off: one pass per time zone (a fleet's hosts mostly share one), not per host."""
    hosts = events.get_column("host").unique().to_list()
    zones: dict[str, list[str | None]] = {}
    for host in hosts:
        zones.setdefault(incident.clock(host).time_zone.key, []).append(host)

    def on_utc(zone: str, rows: pl.LazyFrame) -> pl.Series:
        return rows.select((pl.col("line_local").dt.replace_time_zone(zone, ambiguous="earliest", non_existent="null")
                            .dt.convert_time_zone("UTC") - pl.duration(microseconds=_offset_us(offsets, pl.col("host"))))
                           .alias("line_ts")).collect().to_series()

    if len(zones) == 1:  # one zone: no need to pick its rows out
        return on_utc(next(iter(zones)), events.lazy())
    out = pl.repeat(None, events.height, dtype=pl.Datetime("us", "UTC"), eager=True).alias("line_ts")
    for zone, members in zones.items():
        mask = events.lazy().select(pl.col("host").is_in([h for h in members if h is not None])
                                    | (pl.col("host").is_null() if None in members else pl.lit(False))).collect().to_series()
        out = out.scatter(mask.arg_true(), on_utc(zone, events.lazy().filter(mask)))
    return out


def plausible_window(case: Case, incident: Incident) -> tuple[datetime, datetime] | None:
    """The times a record of this incident can have: the manifest's window, else the middle half of
    the evidence's times widened ten times its length, and by PLAUSIBLE_MARGIN either side."""
    if incident.window is not None:
        start, end = incident.window
    else:
        # Time sources ranked: a time written in the evidence (a log line's stamp, journald's, a
        # capture header) outvotes a file's modification time, which a copy resets to "now".
        confident = pl.col("ts_confidence").cast(pl.String).fill_null("") != "low"
        stamped = pl.concat([case.events.select("ts").collect(), case.stacks.filter(confident).select("ts").collect(),
                             case.samples.filter(confident).select("ts").collect()]).get_column("ts").drop_nulls()
        times = stamped if stamped.len() >= 10 else pl.concat([
            case.events.select("ts").collect(), case.stacks.select("ts").collect(),
            case.samples.select("ts").collect()]).get_column("ts").drop_nulls()
        if times.len() < 10:
            return None
        q1, q3 = times.quantile(0.25, "lower"), times.quantile(0.75, "higher")
        spread = (q3 - q1) * 10  # far beyond where the bulk of the evidence lies, however it is spread
        start, end = q1 - spread, q3 + spread
    return start - PLAUSIBLE_MARGIN, end + PLAUSIBLE_MARGIN


def _mtime_outside(window: tuple[datetime, datetime]) -> pl.Expr:
    """Rows timed only by a file's modification time, outside the window of the evidence's own times."""
    return ((pl.col("ts_confidence").cast(pl.String) == "low") & ~pl.col("ts").is_between(*window)).fill_null(False)


def _time_unknown(samples: pl.DataFrame, stacks: pl.DataFrame, window: tuple[datetime, datetime]) -> list[str]:
    """What is placed as "time unknown", per file, with the reason, for the report to say."""
    notes = []
    for frame, what in ((stacks, "py-spy dump"), (samples, "scrape")):
        rows = frame.filter(_mtime_outside(window))
        for (source,), mine in rows.group_by(pl.col("source_file").cast(pl.String), maintain_order=True):
            at = mine.get_column("ts").min()
            notes.append(f"{source}: time unknown — the {what}'s only time is the file's modification time "
                         f"({at:%Y-%m-%d %H:%M} UTC, likely when it was copied), far from the times written in the "
                         "evidence; it is read but gives no time to any finding"
                         + ("" if what == "py-spy dump" else " and is left off the time axis"))
    return notes


def _outside(frame: pl.DataFrame, window: tuple[datetime, datetime] | None, name: str
             ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """`frame` without the rows outside `window`, and those rows counted per source file."""
    if window is None or frame.is_empty():
        return frame, pl.DataFrame()
    inside = pl.col("ts").is_between(*window) | pl.col("ts").is_null()
    if frame.select(inside.all()).item():
        return frame, pl.DataFrame()
    outside = (frame.filter(~inside).group_by(pl.col("source_file").cast(pl.String))
               .agg(pl.len().alias("records"), pl.col("ts").min().alias("earliest"), pl.col("ts").max().alias("latest"))
               .with_columns(pl.lit(name).alias("frame")))
    return frame.filter(inside), outside


def _kept_text(column: pl.Series) -> pl.Series:
    """`column` (text, mostly null) copied out: polars' strings are views into the buffers they
    were cut from, so the few kept would otherwise hold every batch's text in memory."""
    if column.is_empty():
        return column
    rows = column.is_not_null().arg_true()
    kept = pl.Series(column.name, column.gather(rows).to_list(), dtype=pl.String)
    empty = pl.Series(column.name, [None], dtype=pl.String).extend_constant(None, column.len() - 1)
    return empty.scatter(rows, kept)


def _notable() -> pl.Expr:
    """The lines worth a finding, whose text a lean timeline keeps (see the module's docstring)."""
    return (pl.col("progress").is_null() & (
        (pl.col("priority") <= 5) | pl.col("event").is_not_null() | pl.col("message_id").is_not_null()
        | pl.col("health_ok") | pl.col("ready") | pl.col("http_status").is_not_null()
        | pl.col("rid_sent").is_not_null() | pl.col("rid_received").is_not_null()
        | pl.col("message").str.contains(NOTABLE_START)
        | pl.col("message").str.contains(NOTABLE_WORD, literal=True))).fill_null(False)


def _lean(events: pl.DataFrame, profile: Profile) -> pl.DataFrame:
    """Read lines as a lean timeline holds them: text on notable lines only, few-valued columns as
    categories, narrow numbers, the profile's other fields left out (see the module's docstring)."""
    fields = set(profile.logs.fields) - {*LEAN_FIELDS, *profile.logs.working_when}
    lean = events.with_columns(
        pl.when(_notable()).then(pl.col("message")).alias("message"),
        *(pl.col(c).cast(pl.Categorical) for c in LEAN_CATEGORIES if c in events.columns),
        *(pl.col(c).cast(pl.Int16) for c in LEAN_RANKS if c in events.columns),
        # request counts, exact in 32 bits; a pid is below 2^22 on Linux
        *(pl.col(c).cast(pl.Float32) for c in LEAN_FIELDS if c in events.columns),
        pl.col("pid").cast(pl.Int32),
    ).drop(*fields, *LEAN_DROPPED, strict=False)
    return lean.with_columns(_kept_text(lean.get_column(c)) for c in LEAN_SPARSE_TEXT if c in lean.columns)


def _local_stamp() -> pl.Expr:
    """The log line's own stamp as a naive time (its host's zone and offset are applied later)."""
    return pl.coalesce([pl.col("stamp").str.to_datetime(f, strict=False, time_unit="us")
                        for f in STAMP_FORMATS]).alias("line_local")


def _with_component(events: pl.DataFrame, incident: Incident, profile: Profile) -> pl.DataFrame:
    """`events` with the component each line's unit belongs to (manifest, else profile)."""
    units = events.get_column("unit").unique().cast(pl.String).to_list()
    component_of = {u: incident.component_of_unit(u, profile) for u in units}
    # mapped as the unit's category (text or category alike): a few values hashed, not every line's text
    return events.with_columns(pl.col("unit").replace_strict(component_of, default=None, return_dtype=pl.String)
                               .alias("component"))


def gaps_in_sources(times: pl.DataFrame, by: Sequence[str] = ("source",), label: pl.Expr | None = None
                    ) -> pl.DataFrame:
    """Pauses in each source of `times` (its `by` columns, and ts) longer than GAP_FACTOR × the
    source's median interval and GAP_MIN_S: source (`label`, made on the gaps' rows only; by
    default the one `by` column), from, to, gap_s, median_interval_s."""
    keys = list(by)
    # in time order already (a journal usually is), each source's lines are too: no sort needed
    ordered = times if times.get_column("ts").is_sorted() else times.sort(*keys, "ts")
    previous = pl.col("ts").shift(1).over(keys)
    gaps = (ordered.lazy().with_columns(((pl.col("ts") - previous).dt.total_microseconds() / 1e6).alias("gap_s"),
                                        previous.alias("from"))
            .with_columns(pl.col("gap_s").median().over(keys).alias("median_interval_s")))
    return (gaps.filter((pl.col("gap_s") > GAP_MIN_S) & (pl.col("gap_s") > GAP_FACTOR * pl.col("median_interval_s")))
            .select((pl.col(keys[0]) if label is None else label).cast(pl.String).alias("source"), "from",
                    pl.col("ts").alias("to"), "gap_s", "median_interval_s")
            .sort("from").collect())


@dataclass
class HostRead:
    """What one host's task reads from its folder of `events` (times on the host's own clock): the
    lines the timeline holds, and the small results that need every line of the host."""

    events: pl.DataFrame  # every line read with the profile (lean: only the notable and progress lines)
    activity: pl.DataFrame  # lines per minute and lane (ACTIVITY_KEYS), with the first and last time
    skew: pl.DataFrame  # SKEW_SCHEMA: one row, or none
    jumps: pl.DataFrame  # wall-clock steps (see `clock_jumps`)
    gaps: pl.DataFrame  # pauses per source file and unit (see `gaps_in_sources`)
    outside: pl.DataFrame  # records outside the plausible window, per source file
    progress_streams: pl.DataFrame  # per scheduler: its progress (`forensics.timeline.progress.host_progress`)
    progress_gaps: pl.DataFrame  # its gaps with work pending, and the lines either side
    progress_counts: pl.DataFrame  # progress lines per second and lane


def _read_batch(batch: pl.DataFrame, host: str | None, incident: Incident, profile: Profile) -> pl.DataFrame:
    """A batch of one host's records read with the profile: plain-text log stamps placed in the
    host's zone, each line's reading, its own stamp (`line_local`) and its component."""
    zone = incident.clock(host).time_zone.key
    if zone != "UTC" and batch.height:  # a plain log's stamps were read as UTC: they are the host's local time
        local = (pl.col("ts").dt.replace_time_zone(None).dt.replace_time_zone(zone, ambiguous="earliest",
                                                                              non_existent="null")
                 .dt.convert_time_zone("UTC"))
        # a log whose own epoch fixed its zone (`LOG_ZONE`, forensics.sources.server_log) is placed already
        placed = pl.col("LOG_ZONE").is_not_null() if "LOG_ZONE" in batch.columns else pl.lit(False)
        batch = batch.with_columns(pl.when((pl.col("data_type") == PLAIN_LOG) & ~placed).then(local)
                                   .otherwise(pl.col("ts")).alias("ts"))
    return _with_component(read_lines(batch, profile).with_columns(_local_stamp()), incident, profile)


def _activity(read: pl.DataFrame) -> pl.DataFrame:
    """Lines per minute and lane of a read batch, with their first and last time."""
    # grouped on the categories as they are, made text after: a million short strings are not made
    return (read.lazy().group_by(pl.col("ts").dt.truncate("1m").alias("minute"), *ACTIVITY_KEYS)
            .agg(pl.len().alias("lines"), pl.col("ts").min().alias("first"), pl.col("ts").max().alias("last"))
            .with_columns(pl.col(c).cast(pl.String) for c in ("host", "identifier", "unit")).collect())


def _skew(read: pl.DataFrame, zone: str) -> pl.Series:
    """Per line with its own stamp (journald's records): the stamp read in the host's `zone` minus
    journald's time, in seconds. The host's clock offset is on both, so it cancels."""
    on_utc = (pl.col("line_local").dt.replace_time_zone(zone, ambiguous="earliest", non_existent="null")
              .dt.convert_time_zone("UTC"))
    return (read.lazy().filter(pl.col("line_local").is_not_null() & (pl.col("data_type") != PLAIN_LOG))
            .select(((on_utc - pl.col("ts")).dt.total_microseconds() / 1e6).alias("skew")).collect().to_series()
            .drop_nulls())


class _SliceRead(NamedTuple):
    """What `read_host` keeps of one slice of a host's records."""

    outside: pl.DataFrame
    activity: pl.DataFrame
    skew: pl.Series
    clocks: pl.DataFrame
    sources: pl.DataFrame
    progress: pl.DataFrame
    per_second: pl.DataFrame
    kept: pl.DataFrame


def read_host(case_dir: str, host: str | None, extras: list[str], incident: Incident, profile: Profile,
              window: tuple[datetime, datetime] | None, lean: bool, held: pl.DataFrame | None = None) -> HostRead:
    """One host's `events` read onto its timeline (a task: `forensics.case.cluster` runs one per host
    folder, in this process or on a Dask worker). Lean: batch by batch, keeping only the lines worth
    a finding (see the module's docstring); the rest are counted in `activity`, and of the progress
    lines only their numbers are held until the gaps are found. `held`: the folder's rows as the
    ingest that wrote them still holds them (`partition_rows`, read instead of the file)."""
    if held is not None:  # sliced as it is: a lazy query over rows in many pieces would copy them into one
        rows = held
        scan, total = rows.lazy(), rows.height
    else:
        scan = scan_partition(location(case_dir), "events", host, extras).select(_event_columns(extras))
        total = scan.select(pl.len()).collect().item()
    step = LEAN_BATCH_ROWS if lean else max(-(-total // SLICES_AT_ONCE) if total >= HELD_SLICE_ABOVE else total, 1)
    zone = incident.clock(host).time_zone.key

    def read_slice(offset: int) -> _SliceRead:
        piece = rows.slice(offset, step) if held is not None else scan.slice(offset, step).collect()
        batch, outside = _outside(piece.with_row_index("_at", offset), window, "events")
        read = _read_batch(batch, host, incident, profile)
        return _SliceRead(
            outside, _activity(read), _skew(read, zone),
            read.select(pl.col("_at").alias("_row"), "_BOOT_ID", "__REALTIME_TIMESTAMP", "__MONOTONIC_TIMESTAMP"),
            # the source's name is made for the gaps found, not for every line
            read.select("source_file", "unit", "ts"),
            progress_of(read, profile), count_progress(read, ACTIVITY_KEYS),
            _lean(read.filter(_notable()), profile) if lean else read)

    # Slices, not the streaming engine's batches: it reads ahead (about 1 GB in flight at 10 M).
    # An empty folder is read once too: its empty frames have the columns.
    offsets = range(0, max(total, 1), step)
    if len(offsets) == 1:
        slices = [read_slice(offsets[0])]
    else:  # each slice is read when a thread takes it up: SLICES_AT_ONCE of them in memory at once
        with ThreadPoolExecutor(max_workers=SLICES_AT_ONCE, thread_name_prefix="forensics-slice") as pool:
            slices = list(pool.map(read_slice, offsets))
    outsides, counted, skews, clocks, sources, progress, per_second, kept = map(list, zip(*slices))
    skew = pl.concat(skews)
    stats = pl.DataFrame({"host": [host], "line_minus_journal_s": [skew.median()],
                          "spread_s": [skew.quantile(0.95) - skew.quantile(0.05)], "lines": [skew.len()]},
                         schema=SKEW_SCHEMA) if skew.len() else pl.DataFrame(schema=SKEW_SCHEMA)
    jumps = _host_jumps(scan, pl.concat(clocks).with_columns(pl.lit(host, pl.String).alias("host")), step)
    activity = (pl.concat(counted).group_by("minute", *ACTIVITY_KEYS)
                .agg(pl.col("lines").sum(), pl.col("first").min(), pl.col("last").max()))
    streams, gaps, either_side = host_progress(pl.concat(progress), own_ends(activity), profile)
    events = pl.concat(kept, how="vertical_relaxed")
    if lean:  # the progress lines either side of a gap, and each scheduler's first and last, read again
        wanted = _rows_at(scan, either_side, step)
        events = pl.concat([events, _lean(_read_batch(wanted, host, incident, profile), profile)],
                           how="vertical_relaxed").sort("_at")
    # the lines either side of each gap, picked before their columns are cut: a select of every
    # row would copy the rows of every slice into one piece
    ends = pl.concat([gaps.get_column("_at"), gaps.get_column("_next_at")]).drop_nulls().implode()
    lines = events.lazy().filter(pl.col("_at").is_in(ends)).select("_at", *LINE).collect()
    gaps = (gaps.join(lines, on="_at", how="left", maintain_order="left")
            .join(lines.rename({c: f"next_{c}" for c in LINE}), left_on="_next_at", right_on="_at", how="left",
                  maintain_order="left").drop("_at", "_next_at"))
    counts = (pl.concat(per_second).group_by("second", *ACTIVITY_KEYS)
              .agg(pl.col("lines").sum(), pl.col("first").min(), pl.col("last").max()))
    outside = pl.concat([o for o in outsides if o.height]) if any(o.height for o in outsides) else pl.DataFrame()
    source_name = pl.format("{} {}", pl.col("source_file"), pl.col("unit").cast(pl.String).fill_null("?"))
    return HostRead(cut_alike(columns_of_frame(events, [c for c in events.columns if c != "_at"])), activity, stats, jumps,
                    gaps_in_sources(pl.concat(sources), ("source_file", "unit"), source_name), outside,
                    streams, gaps, counts)


def _rows_at(scan: pl.LazyFrame, places: pl.Series, step: int) -> pl.DataFrame:
    """The records of a host folder at `places` (`_at`: their place in it), read slice by slice of
    `step` records: only the slices that hold one are read, never the whole folder at once."""
    places = places.cast(pl.UInt32).sort()
    slices = (places // step).unique().sort().to_list()
    found = [scan.slice(n * step, step).collect().with_row_index("_at", n * step)
             .filter(pl.col("_at").is_in(places.implode())) for n in slices]
    return pl.concat(found) if found else scan.head(0).collect().with_row_index("_at")


def _host_jumps(scan: pl.LazyFrame, clocks: pl.DataFrame, step: int) -> pl.DataFrame:
    """`clock_jumps` of one host's folder, found on its clock columns alone (`_row`: a record's
    place in the folder); the few records either side of a step are read back from the folder."""
    found = _step_places(clocks)
    if found.is_empty():
        return pl.DataFrame(schema=JUMPS_SCHEMA)
    rows = _rows_at(scan, pl.concat([found.get_column("_row"), found.get_column("_before")]).unique(), step)

    def at(places: pl.Series) -> pl.DataFrame:
        return places.rename("_at").to_frame().join(rows, on="_at", how="left", maintain_order="left")

    return _jumps_table(found, at(found.get_column("_before")), at(found.get_column("_row")))


def _in_time_order(events: pl.DataFrame) -> pl.DataFrame:
    """`events` sorted by time (stable), a column at a time: each column is released once its
    sorted copy is made, so sorting a big timeline costs one column more, not a second frame."""
    order = (events.lazy().select(pl.int_range(pl.len(), dtype=pl.UInt32).sort_by("ts", maintain_order=True))
             .collect().to_series())
    columns = []
    for name in events.columns:
        columns.append(events.get_column(name).gather(order))
        events.drop_in_place(name)
    return pl.DataFrame(columns)


def _partitions(case: Case) -> list[str | None]:
    """The hosts of the case's `events` folders (the manifest's layout)."""
    return list(case.manifest.get("layout", {}).get("partitions", {}).get("events", []))


def _true_time(offsets: dict[str, float], column: str = "ts") -> pl.Expr:
    """A time `column` with each row's host clock offset taken off."""
    return (pl.col(column) - pl.duration(microseconds=_offset_us(offsets, pl.col("host").cast(pl.String))))\
        .alias(column)


def _shifted(frame: pl.DataFrame, offsets: dict[str, float], *columns: str) -> pl.DataFrame:
    """`frame` with its time `columns` taken off each row's host clock offset."""
    if frame.is_empty() or not any(offsets.values()):
        return frame
    return frame.with_columns(_true_time(offsets, c) for c in columns)


def build_timeline(case: Case, incident: Incident, profile: Profile, lean: bool | None = None,
                   progress: Progress | None = None, run: Runner | None = None) -> Timeline:
    """Read the case's frames onto one timeline (lean or not: by the case's size unless told): one
    task per host folder (`read_host`, on `run`: this process, or the Dask cluster FORENSICS_DASK
    names; `progress` shows them), whose small results are combined here."""
    if lean is None:
        lean = case.manifest.get("totals", {}).get("events", 0) > LEAN_ABOVE
    window = plausible_window(case, incident)
    extras = case.manifest.get("layout", {}).get("extra_columns", {}).get("events", [])
    hosts = _partitions(case) or [None]  # a case of no events has one empty folder, of no host
    chosen = run or cluster.runner()
    # the rows an ingest in this process still holds, narrowed now to what the timeline reads, so
    # that the other columns are released before the work starts; a lean timeline reads its
    # batches from the files instead, so that its memory stays bounded
    held = ({host: partition_rows(rows, "events", host, extras, _event_columns(extras))
             for host, rows in case.held_events.items()} if isinstance(chosen, cluster.Local) and not lean else {})
    case.held_events.clear()
    try:
        chosen.check_paths([case.path])
        parts: list[HostRead] = chosen.map(read_host, [(place_text(case.path), host, extras, incident, profile, window,
                                                        lean, held.get(host)) for host in hosts], "hosts", progress)
    finally:
        if run is None:
            chosen.close()
    held.clear()  # what the timeline keeps of those rows it now holds itself
    events = pl.concat([part.events for part in parts], how="vertical_relaxed")
    for part in parts:  # the hosts' lines are now held once, in `events`
        part.events = part.events.clear()
    if lean:  # the clock columns served the clock steps, found per host
        events = events.drop("__REALTIME_TIMESTAMP", "__MONOTONIC_TIMESTAMP", "_BOOT_ID")
    if not events.get_column("ts").is_sorted():  # each host is in order per input, not across hosts or inputs
        events = _in_time_order(events)
    pairs = request_pairs(events)
    placed = estimate_offsets(pairs, sorted(h for h in hosts if h is not None), incident)
    offsets = {host: seconds for host, (seconds, _) in placed.items()}
    if any(offsets.values()):
        events = replace_columns(events, events.lazy().select(_true_time(offsets)).collect().to_series())
    if events.get_column("ts").is_sorted():  # say so: every detector's sort by time is then free
        events = replace_columns(events, events.get_column("ts").set_sorted())
    events = columns_of_frame(events, [c for c in events.columns if c != "line_local"],
                              _line_ts(events, incident, offsets))
    activity = _shifted(pl.concat([part.activity for part in parts]), offsets, "first", "last")
    activity = activity.with_columns(pl.col("first").dt.truncate("1m").alias("minute")) if any(offsets.values()) \
        else activity
    several = len(hosts) > 1
    gaps = pl.concat([_shifted(part.gaps.with_columns(
        (pl.col("source") + f" on {host}") if several and host is not None else pl.col("source"),
        pl.lit(host, pl.String).alias("host")), offsets, "from", "to").drop("host")
        for part, host in zip(parts, hosts)]).sort("from")
    jumps = _shifted(pl.concat([part.jumps for part in parts]), offsets, "before", "after").sort("after")
    streams = _shifted(pl.concat([part.progress_streams for part in parts], how="vertical_relaxed"), offsets,
                       "first", "last")
    progress_gaps = _shifted(pl.concat([part.progress_gaps for part in parts], how="vertical_relaxed"), offsets,
                             "ts", "next_ts").sort("ts", maintain_order=True)
    counts = _shifted(pl.concat([part.progress_counts for part in parts]), offsets, "second", "first", "last")
    samples = case.samples.with_columns(_true_time(offsets))
    stacks = case.stacks.with_columns(_true_time(offsets)).collect()
    if window is not None:  # a modification time far from the evidence's own times: time unknown
        incident.notes.extend(_time_unknown(samples.collect(), stacks, window))
        stacks = stacks.with_columns(pl.when(_mtime_outside(window)).then(None).otherwise(pl.col("ts")).alias("ts"))
        samples = samples.filter(~_mtime_outside(window))
    outside_samples = pl.DataFrame()
    if window is not None:
        inside = pl.col("ts").is_between(*window) | pl.col("ts").is_null()
        outside_samples = (samples.filter(~inside).group_by(pl.col("source_file").cast(pl.String))
                           .agg(pl.len().alias("records"), pl.col("ts").min().alias("earliest"),
                                pl.col("ts").max().alias("latest"))
                           .with_columns(pl.lit("samples").alias("frame")).collect())
        samples = samples.filter(inside)
    stacks, outside_stacks = _outside(stacks, window, "stacks")
    checks = (pl.concat([part.skew for part in parts])
              .with_columns(pl.col("host").replace_strict(offsets, default=0.0, return_dtype=pl.Float64)
                            .alias("offset_applied_s"),
                            pl.col("host").replace_strict({h: how for h, (_, how) in placed.items()}, default=None,
                                                          return_dtype=pl.String).alias("offset_source"),
                            pl.col("host").map_elements(lambda h: incident.clock(h).time_zone.key,
                                                        return_dtype=pl.String).alias("time_zone"))
              .sort("host"))
    outside_events = [part.outside for part in parts if part.outside.height]
    outside_events = ((pl.concat(outside_events).group_by("source_file", "frame")
                       .agg(pl.col("records").sum(), pl.col("earliest").min(), pl.col("latest").max())
                       .select("source_file", "records", "earliest", "latest", "frame"))
                      if outside_events else pl.DataFrame())
    outside = [f for f in (outside_events, outside_stacks, outside_samples) if f.height]
    return Timeline(events, samples, stacks, case.quarantine.collect(), checks, pairs, jumps, incident, profile,
                    case.manifest, offsets, activity, gaps, streams, progress_gaps, counts,
                    pl.concat(outside).sort("frame", "source_file") if outside else None, case, lean)
