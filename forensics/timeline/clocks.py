"""Clocks: each host's time zone and clock offset, wall-clock steps, and the times a record of the
incident can plausibly have. `forensics.timeline.align` applies them to the whole timeline.

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
- A record whose time lies far outside the incident (`plausible_window`: a forged or damaged
  stamp, a clock reset to 1970) is kept out of the timeline and counted per source; a file's
  modification time far from the evidence's own times is "time unknown".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import polars as pl

from forensics.case.incident import Incident
from forensics.case.opened import Case

PLAUSIBLE_MARGIN = timedelta(days=1)  # how far outside the incident a record's time may still lie
JUMP_S = 1.0  # a wall-clock step smaller than this is indistinguishable from logging delays


def any_offset(offsets_s: dict[str, float]) -> bool:
    """Whether any host's clock offset moves a time by a microsecond or more."""
    return any(round(seconds * 1e6) for seconds in offsets_s.values())


def _offset_us(offsets_s: dict[str, float], host: pl.Expr) -> pl.Expr:
    """Each row's host clock offset in microseconds (0 for hosts without one)."""
    offsets = {name: round(seconds * 1e6) for name, seconds in offsets_s.items() if round(seconds * 1e6)}
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


def step_places(clocks: pl.DataFrame) -> pl.DataFrame:
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


def jumps_table(found: pl.DataFrame, before: pl.DataFrame, after: pl.DataFrame) -> pl.DataFrame:
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
    found = step_places(clocks)
    return jumps_table(found, events[found.get_column("_before")], events[found.get_column("_row")])


def line_ts(events: pl.DataFrame, incident: Incident, offsets: dict[str, float]) -> pl.Series:
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


VOUCHING_RECORDS = 10  # a source with this many records stamped in the evidence vouches for its own times


@dataclass(frozen=True)
class Window:
    """The times a record of this incident can have: `start`–`end` for the evidence as a whole, and
    per source that lies elsewhere but whose own records agree with each other (a kernel journal of
    the day before, a log of another week), that source's own span."""

    start: datetime
    end: datetime
    own: tuple[tuple[str, datetime, datetime], ...] = ()  # (source file, start, end)

    def inside(self) -> pl.Expr:
        """Rows whose time is plausible (or unknown)."""
        inside = pl.col("ts").is_between(self.start, self.end) | pl.col("ts").is_null()
        for source, start, end in self.own:
            inside = inside | ((pl.col("source_file").cast(pl.String) == source) & pl.col("ts").is_between(start, end))
        return inside


def _widened(q1: datetime, q3: datetime) -> tuple[datetime, datetime]:
    """The middle half of some times widened ten times its length, and by PLAUSIBLE_MARGIN either side."""
    spread = (q3 - q1) * 10  # far beyond where the bulk of the evidence lies, however it is spread
    return q1 - spread - PLAUSIBLE_MARGIN, q3 + spread + PLAUSIBLE_MARGIN


def plausible_window(case: Case, incident: Incident) -> Window | None:
    """The times a record of this incident can have: the manifest's window, else the middle half of
    the evidence's times widened ten times its length, and by PLAUSIBLE_MARGIN either side. A
    source of VOUCHING_RECORDS stamped records or more that lies outside it keeps its own span (its
    records agree with each other: another day's evidence, not a forged clock), and the incident's
    notes say so; a few records far from the rest of their own source are still left out. No window
    reaches past today (the analysis runs after the evidence was written), unless the bulk of the
    evidence lies there. None (every record kept) when the evidence writes fewer than ten times of
    its own: too few to judge the rest by, and a file's modification time never outvotes them."""
    if incident.window is not None:
        start, end = incident.window
        return Window(start - PLAUSIBLE_MARGIN, end + PLAUSIBLE_MARGIN)
    # Time sources ranked: a time written in the evidence (a log line's stamp, journald's, a
    # capture header) outvotes a file's modification time, which a copy resets to "now".
    confident = pl.col("ts_confidence").cast(pl.String).fill_null("") != "low"
    columns = [pl.col("ts"), pl.col("source_file").cast(pl.String)]
    events = case.events_of(["ts", "source_file"]).select(columns).collect()
    stamped = pl.concat([events, case.stacks.filter(confident).select(columns).collect(),
                         case.samples.filter(confident).select(columns).collect()]).drop_nulls("ts")
    if stamped.height < 10:
        if stamped.height:  # a few times the evidence writes: too few to judge by, and no copy's mtime outvotes them
            return None
        stamped = pl.concat([events, case.stacks.select(columns).collect(),
                             case.samples.select(columns).collect()]).drop_nulls("ts")
    if stamped.height < 10:
        return None
    times = stamped.get_column("ts")
    q1 = times.quantile(0.25, "lower")
    start, end = _widened(q1, times.quantile(0.75, "higher"))
    today = datetime.now(UTC) + PLAUSIBLE_MARGIN
    if q1 <= today:  # evidence is read after it was written: a time past today is a forged or reset clock
        end = min(end, today)
    sources = (stamped.group_by("source_file")
               .agg(pl.len().alias("records"), pl.col("ts").quantile(0.25, "lower").alias("q1"),
                    pl.col("ts").quantile(0.75, "higher").alias("q3"), pl.col("ts").min().alias("first"),
                    pl.col("ts").max().alias("last"))
               .filter((pl.col("records") >= VOUCHING_RECORDS) & pl.col("source_file").is_not_null()
                       & ((pl.col("first") < start) | (pl.col("last") > end)))
               .sort("source_file"))
    own = []
    for source, _, q1, q3, first, last in sources.iter_rows():
        own_start, own_end = _widened(q1, q3)
        own_end = min(own_end, today)
        if own_start >= own_end or q1 > today:
            continue
        own.append((source, own_start, own_end))
        incident.notes.append(
            f"{source}: its times ({first:%Y-%m-%d %H:%M} … {last:%Y-%m-%d %H:%M} UTC) lie apart from the rest of "
            f"the evidence ({start + PLAUSIBLE_MARGIN:%Y-%m-%d} … {end - PLAUSIBLE_MARGIN:%Y-%m-%d}); its records "
            "agree with each other, so they are read as written — check that it belongs to this incident")
    return Window(start, end, tuple(own))


def mtime_outside(window: Window) -> pl.Expr:
    """Rows timed only by a file's modification time, outside the window of the evidence's own times."""
    return ((pl.col("ts_confidence").cast(pl.String) == "low") & ~window.inside()).fill_null(False)


def time_unknown(samples: pl.DataFrame, stacks: pl.DataFrame, window: Window) -> list[str]:
    """What is placed as "time unknown", per file, with the reason, for the report to say."""
    notes = []
    for frame, what in ((stacks, "py-spy dump"), (samples, "scrape")):
        rows = frame.filter(mtime_outside(window))
        for (source,), mine in rows.group_by(pl.col("source_file").cast(pl.String), maintain_order=True):
            at = mine.get_column("ts").min()
            notes.append(f"{source}: time unknown — the {what}'s only time is the file's modification time "
                         f"({at:%Y-%m-%d %H:%M} UTC, likely when it was copied), far from the times written in the "
                         "evidence; it is read but gives no time to any finding"
                         + ("" if what == "py-spy dump" else " and is left off the time axis"))
    return notes


def outside_window(frame: pl.DataFrame, window: Window | None, name: str
                   ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """`frame` without the rows outside `window`, and those rows counted per source file."""
    if window is None or frame.is_empty():
        return frame, pl.DataFrame()
    inside = window.inside()
    if frame.select(inside.all()).item():
        return frame, pl.DataFrame()
    outside = (frame.filter(~inside).group_by(pl.col("source_file").cast(pl.String))
               .agg(pl.len().alias("records"), pl.col("ts").min().alias("earliest"), pl.col("ts").max().alias("latest"))
               .with_columns(pl.lit(name).alias("frame")))
    return frame.filter(inside), outside


def zoned_hosts(incident: Incident) -> dict[str, str]:
    """The hosts incident.toml places in a zone other than UTC, with their zones."""
    return {host: clock.time_zone.key for host, clock in incident.hosts.items() if clock.time_zone.key != "UTC"}


def in_host_zones(incident: Incident, column: str = "ts") -> pl.Expr:
    """A snapshot's time `column` placed in its host's zone where it was read from a stamp without
    a zone (`ts_confidence` "medium": a capture header, a file name or a dump's own stamp, read as
    UTC), as a plain log's stamps are (incident.toml's `[hosts."NAME"] time_zone`)."""
    zoned = zoned_hosts(incident)
    expr = pl.col(column)
    zoneless = pl.col("ts_confidence").cast(pl.String) == "medium"
    for host, zone in zoned.items():
        local = (pl.col(column).dt.replace_time_zone(None).dt.replace_time_zone(zone, ambiguous="earliest",
                                                                                 non_existent="null")
                 .dt.convert_time_zone("UTC"))
        expr = pl.when(zoneless & (pl.col("host").cast(pl.String) == host)).then(local).otherwise(expr)
    return expr.alias(column)


def true_time(offsets: dict[str, float], column: str = "ts") -> pl.Expr:
    """A time `column` with each row's host clock offset taken off (as it is where no host has one:
    the scrapes are asked a dozen questions, and each would map every sample's host anew)."""
    if not any_offset(offsets):
        return pl.col(column)
    return (pl.col(column) - pl.duration(microseconds=_offset_us(offsets, pl.col("host").cast(pl.String))))\
        .alias(column)


def shifted(frame: pl.DataFrame, offsets: dict[str, float], *columns: str) -> pl.DataFrame:
    """`frame` with its time `columns` taken off each row's host clock offset."""
    if frame.is_empty() or not any_offset(offsets):
        return frame
    return frame.with_columns(true_time(offsets, c) for c in columns)
