"""Clock checks as findings: a host's wall clock that stepped while journald's monotonic clock did
not, and records that lie far outside the incident (a forged, damaged or reset clock), which the
timeline set aside. Both are notes on the data's quality, not faults."""

from __future__ import annotations

import polars as pl

from forensics.detect import Evidence, Finding, clock, event_evidence
from forensics.detect.registry import Context, detector

TRACK = "data quality"


@detector("clocks")
def run(ctx: Context) -> list[Finding]:
    """A finding per wall-clock step and per input with records far outside the incident."""
    timeline = ctx.timeline
    found = []
    for jump in timeline.jumps.iter_rows(named=True):
        found.append(Finding("clock_jump", TRACK, None, jump["after"],
                             f"{jump['host']}'s wall clock stepped {jump['jump_s']:+.3f} s between {clock(jump['before'])} "
                             f"and {clock(jump['after'])} (journald's monotonic clock did not): times either side of it "
                             "are on different clocks.", None,
                             event_evidence(pl.DataFrame([jump]).rename({"after": "ts"}), 1), jump["host"]))
    if timeline.out_of_range is not None:
        for row in timeline.out_of_range.iter_rows(named=True):
            found.append(Finding("out_of_range", TRACK, None, None,
                                 f"{row['records']:,} {row['frame']} records of {row['source_file']} lie far outside the "
                                 f"incident ({row['earliest']:%Y-%m-%d %H:%M:%S} … {row['latest']:%Y-%m-%d %H:%M:%S} "
                                 "UTC): a forged, damaged or reset clock; left out of the analysis.", None,
                                 [Evidence(row["frame"], row["source_file"], None, None, None, "outside the window")]))
    return found
