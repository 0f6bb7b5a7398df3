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
  another host (`request_received`). The median difference of the two hosts' stamps is their
  clock difference plus the network latency (milliseconds, not subtracted); the interquartile
  range is reported as its uncertainty. Estimates hang off hosts whose offset is known.
- Within one boot, journald's monotonic clock never jumps: where realtime minus monotonic changes
  by more than `JUMP_S` between consecutive records, the wall clock was stepped (`clock_jumps`),
  and the analysis says so rather than trusting the order of the wall-clock times.
- Storage is always UTC; the display zone is the renderer's parameter.

A big case (over LEAN_ABOVE records) gets a lean timeline, so that memory follows what the
detectors read rather than the size of the logs: the case is read in batches, each line read
with the profile as it comes, and only the lines worth a finding keep their text (warnings and
worse, the profile's line kinds, systemd's and sudo's lines, health checks and access lines,
tracebacks); progress lines keep their numbers, routine lines their time, host and unit. A text
that a finding quotes is fetched back from the case (`Timeline.with_messages`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timedelta

import polars as pl

from forensics.case import Case
from forensics.incident import Incident
from forensics.logs import read_lines
from forensics.profiles import Profile

STAMP_FORMATS = ("%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%d %H:%M:%S")
PLAIN_LOG = "log:line"
PLAUSIBLE_MARGIN = timedelta(days=1)  # how far outside the incident a record's time may still lie  # the data_type of plain-text server log records
JUMP_S = 1.0  # a wall-clock step smaller than this is indistinguishable from logging delays
#: The columns of `events` the detectors read (the rest stay in the case for whoever digs further).
EVENT_COLUMNS = ("ts", "__REALTIME_TIMESTAMP", "__MONOTONIC_TIMESTAMP", "_BOOT_ID", "host", "unit", "identifier",
                 "pid", "priority", "message_id", "invocation_id", "message", "data_type", "source_file",
                 "source_offset", "source_line")


LEAN_ENV = "FORENSICS_LEAN_ABOVE"  # records above which the timeline is lean (default 2 M; 0: always)
LEAN_ABOVE = int(os.environ.get(LEAN_ENV) or 2_000_000)
LEAN_BATCH_ROWS = 100_000  # records read with the profile at a time when lean
# In a lean timeline: the progress fields the detectors read (others stay in the case), the
# columns held as categories (few distinct values, long ones), and those left out.
LEAN_FIELDS = ("running_req", "queue_req", "inflight_req")
LEAN_CATEGORIES = ("_BOOT_ID", "unit", "identifier", "data_type", "source_file", "tag", "progress", "event", "track",
                   "component")
LEAN_RANKS = ("line_dp", "line_tp", "line_pp", "line_ep")  # Int16 (a rank is below 32768)
LEAN_DROPPED = ("invocation_id", "stamp")
# text on few lines, cut out of each batch's messages (copied out: see `_kept_text`)
LEAN_SPARSE_TEXT = ("message", "message_id", "rid_sent", "rid_received", "http_method", "http_path")
# lines whose text a detector reads although no profile rule names them: tracebacks, systemctl
NOTABLE_TEXT = r"^\s|^Traceback |^\w[\w.]*(?:Error|Exception|Interrupt|Exit)\b|systemctl"


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
    # records whose time lies far outside the incident (a forged or damaged stamp, a clock reset
    # to 1970): kept out of every detector, listed per source in data quality
    out_of_range: pl.DataFrame | None = None
    case: Case | None = None  # where a lean timeline fetches the text of the lines it quotes
    lean: bool = False  # routine lines without their text (see the module's docstring)

    def with_messages(self, rows: pl.DataFrame) -> pl.DataFrame:
        """`rows` of `events` with their `message` (a lean timeline keeps the text of notable
        lines only: the others' is read back from the case by file and place)."""
        if not self.lean or self.case is None or rows.is_empty() or rows.get_column("message").null_count() == 0:
            return rows
        keys = ("source_file", "source_offset", "source_line")
        wanted = rows.select(pl.col("source_file").cast(pl.String), "source_offset", "source_line").unique()
        files = wanted.get_column("source_file").unique().implode()
        found = (self.case.events.filter(pl.col("source_file").is_in(files))  # row groups of other files skipped
                 .select(*keys, pl.col("message").alias("_text"))
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
    range of receiver stamp minus sender stamp, in seconds (each on its own host's clock)."""
    sent = events.filter(pl.col("rid_sent").is_not_null()).select("host", pl.col("rid_sent").alias("rid"), "ts")
    received = events.filter(pl.col("rid_received").is_not_null()).select(
        pl.col("host").alias("receiver"), pl.col("rid_received").alias("rid"), pl.col("ts").alias("ts_received"))
    diff = (pl.col("ts_received") - pl.col("ts")).dt.total_microseconds() / 1e6
    return (sent.join(received, on="rid").filter(pl.col("host") != pl.col("receiver"))
            .group_by(pl.col("host").alias("sender"), "receiver")
            .agg(diff.median().alias("median_s"), (diff.quantile(0.75) - diff.quantile(0.25)).alias("iqr_s"),
                 pl.len().alias("requests"))
            .sort("sender", "receiver"))


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


def clock_jumps(events: pl.DataFrame) -> pl.DataFrame:
    """Per host and boot, in monotonic order: where the wall clock stepped (realtime minus monotonic
    changed by more than JUMP_S), by how much, and the records either side."""
    clocked = (pl.col("__REALTIME_TIMESTAMP").is_not_null() & pl.col("__MONOTONIC_TIMESTAMP").is_not_null()
               & pl.col("_BOOT_ID").is_not_null())
    clocks = events.select(pl.int_range(pl.len(), dtype=pl.UInt32).alias("_row"), "host", "_BOOT_ID",
                           "__REALTIME_TIMESTAMP", "__MONOTONIC_TIMESTAMP")
    one_run = events.select(clocked.all() & (pl.col("host").n_unique() == 1)
                            & (pl.col("_BOOT_ID").n_unique() == 1)).item()
    # one journal of one boot (the usual big case) is not split into per-run copies
    runs = [clocks] if one_run else clocks.filter(clocked).partition_by("host", "_BOOT_ID", maintain_order=True)
    steps = [_steps(run) for run in runs if run.height]
    found = pl.concat(steps) if steps else pl.DataFrame(schema={"_row": pl.UInt32, "_before": pl.UInt32,
                                                               "jump_s": pl.Float64})
    after, before = events[found.get_column("_row")], events[found.get_column("_before")]
    return after.select("host", "_BOOT_ID").with_columns(
        before.get_column("ts").alias("before"), after.get_column("ts").alias("after"), found.get_column("jump_s"),
        before.get_column("message").alias("message_before"), after.get_column("message"),
        after.get_column("source_file"), after.get_column("source_offset"), after.get_column("source_line"))


def _line_ts(events: pl.DataFrame, incident: Incident, offsets: dict[str, float]) -> pl.Series:
    """The log-line stamps (`line_local`, naive) as true UTC, read in each host's zone, the host's
    offset taken off: one pass per time zone (a fleet's hosts mostly share one), not per host."""
    hosts = events.get_column("host").unique().to_list()
    zones: dict[str, list[str | None]] = {}
    for host in hosts:
        zones.setdefault(incident.clock(host).time_zone.key, []).append(host)

    def on_utc(zone: str, rows: pl.DataFrame) -> pl.Series:
        return rows.select((pl.col("line_local").dt.replace_time_zone(zone, ambiguous="earliest", non_existent="null")
                            .dt.convert_time_zone("UTC") - pl.duration(microseconds=_offset_us(offsets, pl.col("host"))))
                           .alias("line_ts")).to_series()

    if len(zones) == 1:  # one zone: no need to pick its rows out
        return on_utc(next(iter(zones)), events.select("host", "line_local"))
    out = pl.repeat(None, events.height, dtype=pl.Datetime("us", "UTC"), eager=True).alias("line_ts")
    for zone, members in zones.items():
        mask = events.select(pl.col("host").is_in([h for h in members if h is not None])
                             | (pl.col("host").is_null() if None in members else pl.lit(False))).to_series()
        out = out.scatter(mask.arg_true(), on_utc(zone, events.select("host", "line_local").filter(mask)))
    return out


def _plain_log_ts(events: pl.DataFrame, incident: Incident) -> pl.DataFrame:
    """Plain-text log records (`forensics.sources.server_log`) carry their stamp as written, read
    as UTC by the reader: placed here in their host's zone from the manifest."""
    plain = pl.col("data_type") == PLAIN_LOG
    hosts = events.filter(plain).get_column("host").unique().to_list()
    for host in hosts:
        zone = incident.clock(host).time_zone.key
        if zone == "UTC":
            continue
        mine = plain & (pl.col("host").eq_missing(pl.lit(host, pl.String)))
        local = (pl.col("ts").dt.replace_time_zone(None).dt.replace_time_zone(zone, ambiguous="earliest",
                                                                              non_existent="null")
                 .dt.convert_time_zone("UTC"))
        events = events.with_columns(pl.when(mine).then(local).otherwise(pl.col("ts")).alias("ts"))
    return events


def plausible_window(case: Case, incident: Incident) -> tuple[datetime, datetime] | None:
    """The times a record of this incident can have: the manifest's window, else the middle half of
    the evidence's times widened ten times its length, and by PLAUSIBLE_MARGIN either side."""
    if incident.window is not None:
        start, end = incident.window
    else:
        times = pl.concat([case.events.select("ts").collect(), case.stacks.select("ts").collect(),
                           case.samples.select("ts").collect()]).get_column("ts").drop_nulls()
        if times.len() < 10:
            return None
        q1, q3 = times.quantile(0.25, "lower"), times.quantile(0.75, "higher")
        spread = (q3 - q1) * 10  # far beyond where the bulk of the evidence lies, however it is spread
        start, end = q1 - spread, q3 + spread
    return start - PLAUSIBLE_MARGIN, end + PLAUSIBLE_MARGIN


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
    rows = column.is_not_null().arg_true()
    kept = pl.Series(column.name, column.gather(rows).to_list(), dtype=pl.String)
    empty = pl.Series(column.name, [None], dtype=pl.String).extend_constant(None, column.len() - 1)
    return empty.scatter(rows, kept) if column.len() else column


def _lean(events: pl.DataFrame, profile: Profile) -> pl.DataFrame:
    """A batch of read lines as a lean timeline holds them (see the module's docstring)."""
    notable = pl.col("progress").is_null() & (
        (pl.col("priority") <= 5) | pl.col("event").is_not_null() | pl.col("message_id").is_not_null()
        | pl.col("health_ok") | pl.col("ready") | pl.col("http_status").is_not_null()
        | pl.col("rid_sent").is_not_null() | pl.col("rid_received").is_not_null()
        | pl.col("message").str.contains(NOTABLE_TEXT))
    fields = set(profile.logs.fields) - {*LEAN_FIELDS, *profile.logs.working_when}
    lean = events.with_columns(
        pl.when(notable.fill_null(False)).then(pl.col("message")).alias("message"),
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
    units = events.get_column("unit").cast(pl.String).unique().to_list()
    component_of = {u: incident.component_of_unit(u, profile) for u in units}
    return events.with_columns(pl.col("unit").cast(pl.String).replace_strict(component_of, default=None,
                                                                             return_dtype=pl.String)
                               .alias("component"))


def _read_events(case: Case, incident: Incident, profile: Profile, window: tuple[datetime, datetime] | None,
                 lean: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The case's events inside `window`, each line read with the profile and given its component
    (lean: batch by batch, see the module's docstring), and the records outside it per source."""
    scan = case.events.select(EVENT_COLUMNS)

    def read(events: pl.DataFrame) -> pl.DataFrame:
        return _with_component(read_lines(events, profile).with_columns(_local_stamp()), incident, profile)

    if not lean:
        events, outside = _outside(scan.collect(), window, "events")
        return read(events), outside
    batches, outsides = [], []
    total = scan.select(pl.len()).collect().item()
    # Slices, not the streaming engine's batches: it reads ahead (about 1 GB in flight at 10 M).
    for offset in range(0, total, LEAN_BATCH_ROWS):
        batch = scan.slice(offset, LEAN_BATCH_ROWS).collect()
        inside, outside = _outside(batch, window, "events")
        outsides.append(outside)
        batches.append(_lean(read(inside), profile))
    events = pl.concat(batches) if batches else _lean(read(scan.head(0).collect()), profile)
    outside = pl.concat([o for o in outsides if o.height]) if any(o.height for o in outsides) else pl.DataFrame()
    if outside.height:
        outside = (outside.group_by("source_file", "frame").agg(pl.col("records").sum(), pl.col("earliest").min(),
                                                                pl.col("latest").max())
                   .select("source_file", "records", "earliest", "latest", "frame"))
    return events, outside


def _in_time_order(events: pl.DataFrame) -> pl.DataFrame:
    """`events` sorted by time (stable), a column at a time: each column is released once its
    sorted copy is made, so sorting a big timeline costs one column more, not a second frame."""
    order = events.select(pl.int_range(pl.len(), dtype=pl.UInt32).sort_by("ts", maintain_order=True)).to_series()
    columns = []
    for name in events.columns:
        columns.append(events.get_column(name).gather(order))
        events = events.drop(name)
    return pl.DataFrame(columns)


def build_timeline(case: Case, incident: Incident, profile: Profile, lean: bool | None = None) -> Timeline:
    """Read the case's frames onto one timeline (lean or not: by the case's size unless told)."""
    if lean is None:
        lean = case.manifest.get("totals", {}).get("events", 0) > LEAN_ABOVE
    window = plausible_window(case, incident)
    events, outside_events = _read_events(case, incident, profile, window, lean)
    if not events.get_column("ts").is_sorted():  # a case is in order per host and input, not across them
        events = _in_time_order(events)
    if events.select((pl.col("data_type") == PLAIN_LOG).any()).item():
        events = _plain_log_ts(events, incident).sort("ts", maintain_order=True)
    hosts = sorted(h for h in events.get_column("host").unique().to_list() if h is not None)
    pairs = request_pairs(events)
    placed = estimate_offsets(pairs, hosts, incident)
    offsets = {host: seconds for host, (seconds, _) in placed.items()}
    events = events.with_columns((pl.col("ts") - pl.duration(microseconds=_offset_us(offsets, pl.col("host"))))
                                 .alias("ts"))
    if events.get_column("ts").is_sorted():  # say so: every detector's sort by time is then free
        events = events.with_columns(pl.col("ts").set_sorted())
    events = events.with_columns(_line_ts(events, incident, offsets)).drop("line_local")
    samples = case.samples.with_columns(
        (pl.col("ts") - pl.duration(microseconds=_offset_us(offsets, pl.col("host").cast(pl.String)))).alias("ts"))
    outside_samples = pl.DataFrame()
    if window is not None:
        inside = pl.col("ts").is_between(*window) | pl.col("ts").is_null()
        outside_samples = (samples.filter(~inside).group_by(pl.col("source_file").cast(pl.String))
                           .agg(pl.len().alias("records"), pl.col("ts").min().alias("earliest"),
                                pl.col("ts").max().alias("latest"))
                           .with_columns(pl.lit("samples").alias("frame")).collect())
        samples = samples.filter(inside)
    stacks, outside_stacks = _outside(case.stacks.with_columns(
        (pl.col("ts") - pl.duration(microseconds=_offset_us(offsets, pl.col("host")))).alias("ts")).collect(),
        window, "stacks")
    skew = (pl.col("line_ts") - pl.col("ts")).dt.total_microseconds() / 1e6
    # journald's time against the line's own stamp: plain-text logs have only the latter
    checks = (events.select("host", "ts", "line_ts", "data_type")
              .filter(pl.col("line_ts").is_not_null() & (pl.col("data_type") != PLAIN_LOG)).drop("data_type")
              .group_by("host").agg(skew.median().alias("line_minus_journal_s"),
                                    (skew.quantile(0.95) - skew.quantile(0.05)).alias("spread_s"),
                                    pl.len().alias("lines"))
              .with_columns(pl.col("host").replace_strict(offsets, default=0.0, return_dtype=pl.Float64)
                            .alias("offset_applied_s"),
                            pl.col("host").replace_strict({h: how for h, (_, how) in placed.items()}, default=None,
                                                          return_dtype=pl.String).alias("offset_source"),
                            pl.col("host").map_elements(lambda h: incident.clock(h).time_zone.key,
                                                        return_dtype=pl.String).alias("time_zone"))
              .sort("host"))
    outside = [f for f in (outside_events, outside_stacks, outside_samples) if f.height]
    return Timeline(events, samples, stacks, case.quarantine.collect(), checks, pairs, clock_jumps(events),
                    incident, profile, case.manifest,
                    pl.concat(outside).sort("frame", "source_file") if outside else None, case, lean)
