"""Impact in numbers, each with its source and how it was computed — counted in requests and
tokens, not in log lines — over the incident (from started to resolved, or to the end of the data).

- requests that failed: the profile's request-failure line kinds (timeouts, aborts) per unit, and
  access-log answers of 5xx;
- the error rate: failed answers over all answered requests in the access log (health checks left
  out), when there is an access log;
- clients affected: the distinct client addresses of failed answers, where the access log names them;
- tokens not generated: the generation rate of the ten minutes before the start, times the time
  until service came back — an estimate, and said to be one.

Whatever the evidence cannot count is left to people (the post-mortem keeps a TODO for it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import polars as pl

from forensics.timeline.align import Timeline
from forensics.detect import span
from forensics.detect.keytimes import KeyTimes
from forensics.timeline.metrics import counter_rates, label, named, one_copy_per_engine

FAILURE_KINDS = {"request_timeout": "requests timed out", "request_aborted": "requests aborted",
                 "engine_dead": "engine deaths"}
BEFORE = timedelta(minutes=10)  # the generation rate before the start is measured over this
CLIENT = r"(\d{1,3}(?:\.\d{1,3}){3}):\d+ - \""  # uvicorn's access line: client address and port


@dataclass(frozen=True)
class Impact:
    """One number of the impact, with what it counts, where it comes from and how."""

    what: str
    value: float
    source: str
    how: str
    estimate: bool = False

    def sentence(self) -> str:
        """The number in words, with its source."""
        value = f"{self.value:,.0f}" if self.value >= 10 or self.value == int(self.value) else f"{self.value:.2g}"
        return (f"{'about ' if self.estimate else ''}{value} {self.what} — {self.how} (source: {self.source})"
                + (" — an estimate" if self.estimate else ""))


def impact(timeline: Timeline, times: KeyTimes) -> list[Impact]:
    """The impact of the incident in numbers (empty when it has no start)."""
    if times.started is None:
        return []
    end = times.resolved or timeline.last_ts
    if end is None or end <= times.started:
        return []
    window = pl.col("ts").is_between(times.started, end)
    columns = [c for c in ("ts", "event", "unit", "http_status", "health_ok", "http_path", "message")
               if c in timeline.events.columns]
    events = timeline.events.lazy().select(columns).filter(window).collect()  # the columns read, not every one
    out: list[Impact] = []
    if "event" in events.columns:
        failed = (events.filter(pl.col("event").is_in(list(FAILURE_KINDS)))
                  .group_by("event", "unit").len().sort("len", descending=True))
        for kind, unit, count in failed.iter_rows():
            out.append(Impact(FAILURE_KINDS[kind], count, f"{unit or 'logs'}: lines the profile reads as {kind}",
                              "counted from the start until service came back"))
    access = events.filter(pl.col("http_status").is_not_null() & ~pl.col("health_ok")
                           & ~pl.col("http_path").fill_null("").str.starts_with("/health")) \
        if "http_status" in events.columns else pl.DataFrame()
    if access.height:
        bad = access.filter(pl.col("http_status") >= 500)
        out.append(Impact("requests answered with a 5xx", bad.height, "access log lines",
                          f"of {access.height:,} answered requests in the incident"))
        out.append(Impact("% of answered requests failed", 100 * bad.height / access.height, "access log lines",
                          "5xx answers over all answers, health checks left out"))
        clients = bad.select(pl.col("message").str.extract(CLIENT, 1)).to_series().drop_nulls().n_unique()
        if clients:
            out.append(Impact("clients received a 5xx", clients, "access log lines", "distinct client addresses"))
    lost = _tokens_not_generated(timeline, times.started, end)
    if lost is not None:
        rate, name, which = lost
        seconds = (end - times.started).total_seconds()
        out.append(Impact("tokens not generated", rate * seconds, f"{name} (metrics)",
                          f"{rate:,.0f} token/s of {which} over the {span(BEFORE.total_seconds())} before the start, "
                          f"times the {span(seconds)} until service came back", estimate=True))
    return out


def _tokens_not_generated(timeline: Timeline, started: datetime, end: datetime) -> tuple[float, str, str] | None:
    """The generation rate (token/s) before the start, the counter it comes from, and which engines
    it counts: one copy per engine (TP ranks export the same counters), and in prefill/decode
    serving the decode engines only, whose tokens are the users' (prefill's are not tokens users got)."""
    progress = timeline.profile.metrics.progress
    if not progress:
        return None
    name = progress[0]  # the profile lists the generated-tokens counter first
    before = one_copy_per_engine(timeline.samples.filter(named(name))
                                 .filter(pl.col("ts").is_between(started - BEFORE, started)))
    before = before.with_columns(label("engine_type").alias("_role")).with_columns(
        pl.coalesce("_role", pl.col("instance").cast(pl.String).map_elements(
            lambda i: timeline.incident.component_of_instance(i, timeline.profile), return_dtype=pl.String))
        .alias("_role"))
    roles = before.select(pl.col("_role").drop_nulls().unique()).collect().get_column("_role").to_list()
    which = "every engine, one TP rank each"
    if "decode" in roles and "prefill" in roles:
        before, which = before.filter(pl.col("_role") == "decode"), "the decode engines, one TP rank each"
    rates = counter_rates(before.drop("_role"))
    if rates.is_empty():
        return None
    per_interval = rates.filter(~pl.col("reset")).group_by("end").agg(pl.col("rate").sum())
    rate = per_interval.get_column("rate").median()
    return (float(rate), name, which) if rate else None  # type: ignore[arg-type]
