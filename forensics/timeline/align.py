"""One timeline on true UTC: the one place that decides `ts`.

The events are read host by host (`forensics.timeline.host_read.read_host`, one task per host
folder of the case, run in this process or on a Dask cluster): each task returns its host's lines
with the small results that need every line of the host (lines per minute and lane, the log-stamp
skew, clock steps, pauses per source), which are combined here once the hosts' offsets are known
(`forensics.timeline.clocks`: zones, clock offsets, steps, the plausible window). Storage is always
UTC; the display zone is the renderer's parameter.

A big case (over LEAN_ABOVE records) gets a lean timeline, so that memory follows what the
detectors read rather than the size of the logs: each host is read in batches and only the lines
worth a finding are kept (`forensics.timeline.host_read`), and the progress lines (their numbers,
not their text); routine lines are only counted (`Timeline.activity`). A text that a finding quotes
is fetched back from the case (`Timeline.with_messages`).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime

import polars as pl

from forensics.case import cluster
from forensics.case.cluster import Progress, Runner
from forensics.case.incident import Incident
from forensics.case.opened import Case
from forensics.case.places import place_text
from forensics.case.store import partition_rows
from forensics.sources.common.frames import columns_of_frame, replace_columns
from forensics.profiles import Profile
from forensics.timeline.clocks import (
    Window,
    any_offset,
    estimate_offsets,
    in_host_zones,
    line_ts,
    mtime_outside,
    outside_window,
    plausible_window,
    request_pairs,
    shifted,
    time_unknown,
    true_time,
    zoned_hosts,
)
from forensics.timeline.host_read import SLICES_AT_ONCE, HostRead, event_columns, read_batch, read_host

LEAN_ENV = "FORENSICS_LEAN_ABOVE"  # records above which the timeline is lean (default 2 M; 0: always)
LEAN_ABOVE = int(os.environ.get(LEAN_ENV) or 2_000_000)
# Scrapes held in memory by the timeline up to this many samples (about 130 bytes each), read
# from the case anew by each question above it.
HELD_SAMPLES = 2_000_000


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
        columns = event_columns(rows.columns)
        read = [read_batch(part, part.get_column("host")[0], self.incident, self.profile)
                for part in rows.select(columns).partition_by("host", maintain_order=True)]
        if not read:
            read = [read_batch(rows.select(columns), None, self.incident, self.profile)]
        return (pl.concat(read, how="vertical_relaxed")
                .with_columns(true_time(self.offsets))
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


def _in_time_order(events: pl.DataFrame) -> pl.DataFrame:
    """`events` sorted by time (stable), a column at a time on each core: each column is released
    once its sorted copy is made, so sorting a big timeline costs a column or two more, not a
    second frame (a 128-host fleet's 1.4 M lines in 53 columns of 128 pieces each: 1.4 s on one
    core)."""
    order = (events.lazy().select(pl.int_range(pl.len(), dtype=pl.UInt32).sort_by("ts", maintain_order=True))
             .collect().to_series())
    names = events.columns
    columns = []
    with ThreadPoolExecutor(max_workers=SLICES_AT_ONCE, thread_name_prefix="forensics-order") as pool:
        # the columns taken out here, the frame touched by this thread alone; in order, a column is
        # dropped from the frame as soon as its sorted copy is back
        sorted_copies = pool.map(lambda column: column.gather(order), [events.get_column(name) for name in names])
        for name, column in zip(names, sorted_copies):
            columns.append(column)
            events.drop_in_place(name)
    return pl.DataFrame(columns)


def _partitions(case: Case) -> list[str | None]:
    """The hosts of the case's `events` folders (the manifest's layout)."""
    return list(case.manifest.get("layout", {}).get("partitions", {}).get("events", []))


def _read_hosts(case: Case, hosts: list[str | None], incident: Incident, profile: Profile,
                window: Window | None, lean: bool, progress: Progress | None,
                run: Runner | None) -> list[HostRead]:
    """Each host folder of the case read by its own task (`read_host`, on `run`, else on the runner
    FORENSICS_DASK chooses), from the rows an ingest in this process still holds where it can."""
    extras = case.manifest.get("layout", {}).get("extra_columns", {}).get("events", [])
    chosen = run or cluster.runner()
    # the rows an ingest in this process still holds, narrowed now to what the timeline reads, so
    # that the other columns are released before the work starts; a lean timeline reads its
    # batches from the files instead, so that its memory stays bounded
    held = ({host: partition_rows(rows, "events", host, extras, event_columns(extras))
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
    return parts


def _on_true_utc(frame: pl.LazyFrame, incident: Incident, offsets: dict[str, float]) -> pl.LazyFrame:
    """`frame`'s zoneless times placed in their hosts' zones and the hosts' clock offsets taken off;
    left as it is where no host has a zone or an offset: a `ts` rewritten, even as itself, keeps
    every later question's filters on it from reaching the Parquet reader (a count of one metric's
    samples at a 128-host fleet: 0.2 s above the rewrite, 0.02 s in the reader)."""
    if zoned_hosts(incident):
        frame = frame.with_columns(in_host_zones(incident))
    if any_offset(offsets):
        frame = frame.with_columns(true_time(offsets))
    return frame


def _samples_and_stacks(case: Case, incident: Incident, window: Window | None,
                        offsets: dict[str, float]) -> tuple[pl.LazyFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The case's scrapes and dumps on true UTC, those outside the plausible `window` left out:
    samples, stacks, and the records left out of each, counted per source file."""
    samples = _on_true_utc(case.samples, incident, offsets)
    stacks = _on_true_utc(case.stacks, incident, offsets).collect()
    if window is not None:  # a modification time far from the evidence's own times: time unknown
        # only the columns it reads: a fleet's millions of samples decode their labels slowly
        timed = samples.select("ts", "ts_confidence", "source_file").collect()
        incident.notes.extend(time_unknown(timed, stacks, window))
        stacks = stacks.with_columns(pl.when(mtime_outside(window)).then(None).otherwise(pl.col("ts")).alias("ts"))
        samples = samples.filter(~mtime_outside(window))
    outside_samples = pl.DataFrame()
    if window is not None:
        inside = window.inside()
        outside_samples = (samples.filter(~inside).group_by(pl.col("source_file").cast(pl.String))
                           .agg(pl.len().alias("records"), pl.col("ts").min().alias("earliest"),
                                pl.col("ts").max().alias("latest"))
                           .with_columns(pl.lit("samples").alias("frame")).collect())
        samples = samples.filter(inside)
    stacks, outside_stacks = outside_window(stacks, window, "stacks")
    if case.manifest.get("totals", {}).get("samples", HELD_SAMPLES + 1) <= HELD_SAMPLES:
        # read once: the detectors ask the scrapes a dozen questions, and each read the file anew,
        # decoding every sample's labels again (20 ms a question at 46 k samples)
        samples = samples.collect().lazy()
    return samples, stacks, outside_samples, outside_stacks


def _clock_checks(parts: list[HostRead], offsets: dict[str, float], placed: dict[str, tuple[float, str]],
                  incident: Incident) -> pl.DataFrame:
    """Per host: the log-stamp skew measured, the offset applied and where it came from, its zone."""
    return (pl.concat([part.skew for part in parts])
            .with_columns(pl.col("host").replace_strict(offsets, default=0.0, return_dtype=pl.Float64)
                          .alias("offset_applied_s"),
                          pl.col("host").replace_strict({h: how for h, (_, how) in placed.items()}, default=None,
                                                        return_dtype=pl.String).alias("offset_source"),
                          pl.col("host").map_elements(lambda h: incident.clock(h).time_zone.key,
                                                      return_dtype=pl.String).alias("time_zone"))
            .sort("host"))


def build_timeline(case: Case, incident: Incident, profile: Profile, lean: bool | None = None,
                   progress: Progress | None = None, run: Runner | None = None) -> Timeline:
    """Read the case's frames onto one timeline (lean or not: by the case's size unless told): one
    task per host folder (`read_host`, on `run`: this process, or the Dask cluster FORENSICS_DASK
    names; `progress` shows them), whose small results are combined here."""
    if lean is None:
        lean = case.manifest.get("totals", {}).get("events", 0) > LEAN_ABOVE
    window = plausible_window(case, incident)
    hosts = _partitions(case) or [None]  # a case of no events has one empty folder, of no host
    parts = _read_hosts(case, hosts, incident, profile, window, lean, progress, run)
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
        events = replace_columns(events, events.lazy().select(true_time(offsets)).collect().to_series())
    if events.get_column("ts").is_sorted():  # say so: every detector's sort by time is then free
        events = replace_columns(events, events.get_column("ts").set_sorted())
    events = columns_of_frame(events, [c for c in events.columns if c != "line_local"],
                              line_ts(events, incident, offsets))
    activity = shifted(pl.concat([part.activity for part in parts]), offsets, "first", "last")
    activity = activity.with_columns(pl.col("first").dt.truncate("1m").alias("minute")) if any(offsets.values()) \
        else activity
    several = len(hosts) > 1
    gaps = pl.concat([shifted(part.gaps.with_columns(
        (pl.col("source") + f" on {host}") if several and host is not None else pl.col("source"),
        pl.lit(host, pl.String).alias("host")), offsets, "from", "to").drop("host")
        for part, host in zip(parts, hosts)]).sort("from")
    jumps = shifted(pl.concat([part.jumps for part in parts]), offsets, "before", "after").sort("after")
    streams = shifted(pl.concat([part.progress_streams for part in parts], how="vertical_relaxed"), offsets,
                      "first", "last")
    progress_gaps = shifted(pl.concat([part.progress_gaps for part in parts], how="vertical_relaxed"), offsets,
                            "ts", "next_ts").sort("ts", maintain_order=True)
    counts = shifted(pl.concat([part.progress_counts for part in parts]), offsets, "second", "first", "last")
    samples, stacks, outside_samples, outside_stacks = _samples_and_stacks(case, incident, window, offsets)
    checks = _clock_checks(parts, offsets, placed, incident)
    outside_events = [part.outside for part in parts if part.outside.height]
    outside_events = ((pl.concat(outside_events).group_by("source_file", "frame")
                       .agg(pl.col("records").sum(), pl.col("earliest").min(), pl.col("latest").max())
                       .select("source_file", "records", "earliest", "latest", "frame"))
                      if outside_events else pl.DataFrame())
    outside = [f for f in (outside_events, outside_stacks, outside_samples) if f.height]
    return Timeline(events, samples, stacks, case.quarantine.collect(), checks, pairs, jumps, incident, profile,
                    case.manifest, offsets, activity, gaps, streams, progress_gaps, counts,
                    pl.concat(outside).sort("frame", "source_file") if outside else None, case, lean)
