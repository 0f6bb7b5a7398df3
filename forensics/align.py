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
"""

from __future__ import annotations

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


def clock_jumps(events: pl.DataFrame) -> pl.DataFrame:
    """Per host and boot, in monotonic order: where the wall clock stepped (realtime minus monotonic
    changed by more than JUMP_S), by how much, and the records either side."""
    # Sort only the clocks and a row number: the few steps found fetch their rows afterwards.
    clocks = (events.select("host", "_BOOT_ID", "__REALTIME_TIMESTAMP", "__MONOTONIC_TIMESTAMP")
              .with_row_index("_row")
              .filter(pl.col("__REALTIME_TIMESTAMP").is_not_null() & pl.col("__MONOTONIC_TIMESTAMP").is_not_null()
                      & pl.col("_BOOT_ID").is_not_null())
              .sort("host", "_BOOT_ID", "__MONOTONIC_TIMESTAMP"))
    drift = pl.col("__REALTIME_TIMESTAMP") - pl.col("__MONOTONIC_TIMESTAMP")
    # Sorted, each (host, boot) is one run of rows: compare each row with the one before it in
    # the same run (cheaper than a window over the groups).
    same_run = pl.col("host").eq_missing(pl.col("host").shift(1)) & (pl.col("_BOOT_ID") == pl.col("_BOOT_ID").shift(1))
    steps = (clocks.with_columns(((drift - drift.shift(1)) / 1e6).alias("jump_s"),
                                 pl.col("_row").shift(1).alias("_before"))
             .filter(same_run & (pl.col("jump_s").abs() > JUMP_S)))
    after = events[steps.get_column("_row")]
    before = events[steps.get_column("_before")]
    return after.select("host", "_BOOT_ID").with_columns(
        before.get_column("ts").alias("before"), after.get_column("ts").alias("after"), steps.get_column("jump_s"),
        before.get_column("message").alias("message_before"), after.get_column("message"),
        after.get_column("source_file"), after.get_column("source_offset"), after.get_column("source_line"))


def _line_ts(events: pl.DataFrame, incident: Incident, offsets: dict[str, float]) -> pl.Series:
    """The log-line stamps as true UTC, read in each host's zone, the host's offset taken off."""
    naive = pl.coalesce([pl.col("stamp").str.to_datetime(f, strict=False, time_unit="us") for f in STAMP_FORMATS])
    hosts = events.get_column("host").unique().to_list()

    def on_utc(host: str | None, rows: pl.DataFrame) -> pl.Series:
        zone = incident.clock(host).time_zone.key
        return (rows.select(naive.dt.replace_time_zone(zone, ambiguous="earliest", non_existent="null")
                            .dt.convert_time_zone("UTC").alias("line_ts")).to_series()
                .dt.offset_by(f"{-round(offsets.get(host, 0.0) * 1e6)}us"))

    if len(hosts) == 1:  # one host: no need to pick its rows out
        return on_utc(hosts[0], events.select("stamp"))
    out = pl.repeat(None, events.height, dtype=pl.Datetime("us", "UTC"), eager=True).alias("line_ts")
    for host in hosts:
        mask = (events.get_column("host") == host) if host is not None else events.get_column("host").is_null()
        out = out.scatter(mask.arg_true(), on_utc(host, events.select("stamp").filter(mask)))
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


def build_timeline(case: Case, incident: Incident, profile: Profile) -> Timeline:
    """Read the case's frames onto one timeline."""
    window = plausible_window(case, incident)
    raw_events, outside_events = _outside(case.events.select(EVENT_COLUMNS).collect(), window, "events")
    events = read_lines(raw_events, profile)
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
    events = events.with_columns(_line_ts(events, incident, offsets))
    units = events.get_column("unit").unique().to_list()
    component_of = {u: incident.component_of_unit(u, profile) for u in units}
    events = events.with_columns(pl.col("unit").replace_strict(component_of, default=None, return_dtype=pl.String)
                                 .alias("component"))
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
                    pl.concat(outside).sort("frame", "source_file") if outside else None)
