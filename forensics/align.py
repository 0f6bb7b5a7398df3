"""One timeline on true UTC: the one place that decides `ts`.

- Each host's known clock offset (incident.toml `clock_offset_s`, host clock minus true time) is
  taken off every source from that host: journald's realtime stamps, scrape capture times, dump
  capture times.
- Log lines carry their own stamp in the host's local time without a zone (SGLang's
  `[2026-06-18 21:34:47 TP0]`, with or without milliseconds): read in the host's zone from the
  manifest, offset removed, kept as `line_ts` beside journald's `ts`. Their difference per host is
  an estimate of how well the two agree (`clock_checks`): near zero when zone and offset are right;
  a whole number of hours means a wrong time zone; anything else an unknown skew.
- Storage is always UTC; the display zone is the renderer's parameter.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from forensics.case import Case
from forensics.incident import Incident
from forensics.logs import read_lines
from forensics.profiles import Profile

STAMP_FORMATS = ("%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%d %H:%M:%S")
#: The columns of `events` the detectors read (the rest stay in the case for whoever digs further).
EVENT_COLUMNS = ("ts", "__REALTIME_TIMESTAMP", "__MONOTONIC_TIMESTAMP", "_BOOT_ID", "host", "unit", "identifier",
                 "pid", "priority", "message_id", "invocation_id", "message", "source_file", "source_offset",
                 "source_line")


@dataclass
class Timeline:
    """The case's frames on true UTC, with components, plus what the alignment measured."""

    events: pl.DataFrame  # events + the profile's reading of each line + component + line_ts
    samples: pl.LazyFrame
    stacks: pl.DataFrame
    quarantine: pl.DataFrame
    clock_checks: pl.DataFrame  # per host: offset applied, log-stamp vs journald median and spread
    incident: Incident
    profile: Profile
    manifest: dict


def _offset_us(incident: Incident, host: pl.Expr) -> pl.Expr:
    """Each row's host clock offset in microseconds (0 for hosts the manifest does not name)."""
    offsets = {name: round(clock.clock_offset_s * 1e6) for name, clock in incident.hosts.items()}
    return host.replace_strict(offsets, default=0, return_dtype=pl.Int64) if offsets else pl.lit(0, pl.Int64)


def _line_ts(events: pl.DataFrame, incident: Incident) -> pl.Series:
    """The log-line stamps as true UTC, read in each host's zone."""
    out = pl.Series("line_ts", [None] * events.height, dtype=pl.Datetime("us", "UTC"))
    naive = pl.coalesce([pl.col("stamp").str.to_datetime(f, strict=False, time_unit="us") for f in STAMP_FORMATS])
    for host in events.get_column("host").unique().to_list():
        clock = incident.clock(host)
        mask = (events.get_column("host") == host) if host is not None else events.get_column("host").is_null()
        local = events.filter(mask).select(naive.dt.replace_time_zone(clock.time_zone.key, ambiguous="earliest",
                                                                      non_existent="null")
                                           .dt.convert_time_zone("UTC").alias("line_ts")).to_series()
        out = out.scatter(mask.arg_true(), local.dt.offset_by(f"{-round(clock.clock_offset_s * 1e6)}us"))
    return out


def build_timeline(case: Case, incident: Incident, profile: Profile) -> Timeline:
    """Read the case's frames onto one timeline."""
    offset = _offset_us(incident, pl.col("host"))
    events = (read_lines(case.events.select(EVENT_COLUMNS), profile)
              .with_columns((pl.col("ts") - pl.duration(microseconds=offset)).alias("ts"))
              .collect())
    events = events.with_columns(_line_ts(events, incident))
    units = events.get_column("unit").unique().to_list()
    component_of = {u: incident.component_of_unit(u, profile) for u in units}
    events = events.with_columns(pl.col("unit").replace_strict(component_of, default=None, return_dtype=pl.String)
                                 .alias("component"))
    samples = case.samples.with_columns(
        (pl.col("ts") - pl.duration(microseconds=_offset_us(incident, pl.col("host").cast(pl.String)))).alias("ts"))
    stacks = case.stacks.with_columns(
        (pl.col("ts") - pl.duration(microseconds=_offset_us(incident, pl.col("host")))).alias("ts")).collect()
    skew = (pl.col("line_ts") - pl.col("ts")).dt.total_microseconds() / 1e6
    checks = (events.filter(pl.col("line_ts").is_not_null())
              .group_by("host").agg(skew.median().alias("line_minus_journal_s"),
                                    (skew.quantile(0.95) - skew.quantile(0.05)).alias("spread_s"),
                                    pl.len().alias("lines"))
              .with_columns(pl.col("host").map_elements(lambda h: incident.clock(h).clock_offset_s,
                                                        return_dtype=pl.Float64).alias("offset_applied_s"),
                            pl.col("host").map_elements(lambda h: incident.clock(h).time_zone.key,
                                                        return_dtype=pl.String).alias("time_zone"))
              .sort("host"))
    return Timeline(events, samples, stacks, case.quarantine.collect(), checks, incident, profile, case.manifest)
