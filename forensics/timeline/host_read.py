"""One host's events read onto its timeline: a task per host folder of the case (`read_host`, run
in this process or on a Dask cluster), its times still on the host's own clock.

Each task reads its host's lines with the profile and returns them with the small results that
need every line of the host (lines per minute and lane, the log-stamp skew, clock steps, pauses
per source); `forensics.timeline.align` combines them once the hosts' offsets are known.

A lean timeline (a big case) reads each host in batches and keeps only the lines worth a finding
(warnings and worse, the profile's line kinds, systemd's and sudo's lines, health checks and access
lines, tracebacks: with their text), and the progress lines (their numbers, not their text);
routine lines are only counted (`activity`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import NamedTuple

import polars as pl

from forensics.case.incident import Incident
from forensics.case.places import location
from forensics.case.store import scan_partition
from forensics.sources.common.frames import columns_of_frame, cut_alike
from forensics.profiles import Profile
from forensics.sources.kubernetes.kubectl import K8S_COLUMNS
from forensics.timeline.clocks import (
    JUMPS_SCHEMA,
    SKEW_SCHEMA,
    Window,
    jumps_table,
    outside_window,
    step_places,
)
from forensics.timeline.logs import read_lines
from forensics.timeline.progress import (
    LINE,
    count_progress,
    host_progress,
    own_ends,
    progress_of,
)

PLAIN_LOG = "log:line"  # the data_type of plain-text server log records
#: The columns of `events` the detectors read (the rest stay in the case for whoever digs further).
EVENT_COLUMNS = ("ts", "__REALTIME_TIMESTAMP", "__MONOTONIC_TIMESTAMP", "_BOOT_ID", "host", "unit", "identifier",
                 "pid", "priority", "message_id", "invocation_id", "message", "data_type", "source_file",
                 "source_offset", "source_line")
#: Fields some readers add that detectors read too, kept where the case has them: the rank torch
#: prefixes a line with, the Flight Recorder's entries (`forensics.detect.collectives`) and kubectl's
#: objects and numbers (`forensics.sources.kubernetes.kubectl`).
DETECTOR_EXTRAS = ("LOG_RANK", "FR_RANK", "FR_JOB", "FR_DUMPED_AT", "FR_PG", "FR_PG_DESC", "FR_PG_RANKS",
                   "FR_SEQ", "FR_P2P", "FR_OP", "FR_STATE", "FR_INPUT_SIZES", "FR_LAST_ENQUEUED", "FR_LAST_STARTED",
                   "FR_LAST_COMPLETED", "FR_FINDING", "FR_MISSING", "FR_EXPECTED", "FR_ERRORS", "FR_MISSING_DUMPS",
                   "FR_WORLD_SIZE", "LOG_ZONE", *K8S_COLUMNS)


def event_columns(available: list[str]) -> list[str]:
    """The columns of `events` the timeline reads, of those `available`."""
    return [*EVENT_COLUMNS, *(c for c in DETECTOR_EXTRAS if c in available)]


# what a line is counted by in `Timeline.activity` (its lane: host, component or unit, ranks)
ACTIVITY_KEYS = ("host", "component", "identifier", "unit", "line_dp", "line_pp", "line_tp")
GAP_FACTOR = 5.0  # a pause this many times a source's median interval (and over GAP_MIN_S) is a gap
GAP_MIN_S = 60.0
# Records read with the profile at a time when lean: each batch has fixed costs. Measured at 10 M
# entries, 4 alternating runs each: with 100 k-record batches the timeline took 29.7 CPU-s (median),
# with 300 k 23.8, for the same peak within the runs' spread (2,133–2,262 MiB in process either way).
LEAN_BATCH_ROWS = 300_000
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
LEAN_DROPPED = ("invocation_id",)
# text on few lines, cut out of each batch's messages (copied out: see `_kept_text`)
LEAN_SPARSE_TEXT = ("message", "message_id", "rid_sent", "rid_received", "http_method", "http_path")
# lines whose text a detector reads although no profile rule names them: tracebacks, systemctl
# Two searches, not one alternation: a pattern anchored at the line's start stops at its first
# bytes, while one unanchored branch (`systemctl`) made the regex engine read every line whole
# (5× slower over a million lines).
NOTABLE_START = r"^(?:\s|Traceback |\w[\w.]*(?:Error|Exception|Interrupt|Exit)\b)"
NOTABLE_WORD = "systemctl"


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


def read_batch(batch: pl.DataFrame, host: str | None, incident: Incident, profile: Profile) -> pl.DataFrame:
    """A batch of one host's records read with the profile: plain-text log stamps placed in the
    host's zone, each line's reading, its own stamp (`line_local`) and its component."""
    zone = incident.clock(host).time_zone.key
    if zone != "UTC" and batch.height:  # a plain log's stamps were read as UTC: they are the host's local time
        local = (pl.col("ts").dt.replace_time_zone(None).dt.replace_time_zone(zone, ambiguous="earliest",
                                                                              non_existent="null")
                 .dt.convert_time_zone("UTC"))
        # a log whose own epoch fixed its zone (`LOG_ZONE`, forensics.sources.logs.server_log) is placed already
        placed = pl.col("LOG_ZONE").is_not_null() if "LOG_ZONE" in batch.columns else pl.lit(False)
        batch = batch.with_columns(pl.when((pl.col("data_type") == PLAIN_LOG) & ~placed).then(local)
                                   .otherwise(pl.col("ts")).alias("ts"))
    return _with_component(read_lines(batch, profile), incident, profile)


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
              window: Window | None, lean: bool, held: pl.DataFrame | None = None) -> HostRead:
    """One host's `events` read onto its timeline (a task: `forensics.case.cluster` runs one per host
    folder, in this process or on a Dask worker). Lean: batch by batch, keeping only the lines worth
    a finding (see the module's docstring); the rest are counted in `activity`, and of the progress
    lines only their numbers are held until the gaps are found. `held`: the folder's rows as the
    ingest that wrote them still holds them (`partition_rows`, read instead of the file)."""
    if held is not None:  # sliced as it is: a lazy query over rows in many pieces would copy them into one
        rows = held
        scan, total = rows.lazy(), rows.height
    else:
        scan = scan_partition(location(case_dir), "events", host, extras).select(event_columns(extras))
        total = scan.select(pl.len()).collect().item()
    step = LEAN_BATCH_ROWS if lean else max(-(-total // SLICES_AT_ONCE) if total >= HELD_SLICE_ABOVE else total, 1)
    zone = incident.clock(host).time_zone.key

    def read_slice(offset: int) -> _SliceRead:
        piece = rows.slice(offset, step) if held is not None else scan.slice(offset, step).collect()
        batch, outside = outside_window(piece.with_row_index("_at", offset), window, "events")
        read = read_batch(batch, host, incident, profile)
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
        events = pl.concat([events, _lean(read_batch(wanted, host, incident, profile), profile)],
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
    found = step_places(clocks)
    if found.is_empty():
        return pl.DataFrame(schema=JUMPS_SCHEMA)
    rows = _rows_at(scan, pl.concat([found.get_column("_row"), found.get_column("_before")]).unique(), step)

    def at(places: pl.Series) -> pl.DataFrame:
        return places.rename("_at").to_frame().join(rows, on="_at", how="left", maintain_order="left")

    return jumps_table(found, at(found.get_column("_before")), at(found.get_column("_row")))
