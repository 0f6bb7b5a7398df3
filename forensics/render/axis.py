"""The time axis every figure of a report shares: the incident's span and its buckets, times
turned into the display zone's wall clock (plotly has no time zones: storage stays UTC, the axis
title names the zone), the rows that keep labels apart, and the sentence an empty panel shows."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import plotly.graph_objects as go
import polars as pl

from forensics.analyze import Analysis


BUCKETS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)  # seconds
MAX_BUCKETS = 400  # per lane on the timeline
MIN_SPAN_S = 600.0  # the narrowest time axis: ten minutes around evidence that covers less
X_MARGIN = 0.02  # of the span, either side: markers at the window's edges are drawn whole
NARROWEST_PLOT_PX = 560  # the swimlanes in report.html at 1280 px wide (measured): labels are laid out for it


@dataclass(frozen=True)
class Axis:
    """The time axis of one figure: the span, the bucket, and the zone times are drawn in."""

    start: datetime
    end: datetime
    bucket_s: int
    zone: str

    @property
    def every(self) -> str:
        """The bucket as a polars duration."""
        return f"{self.bucket_s}s"


def own_time(analysis: Analysis) -> bool:
    """Whether any evidence carries a time of its own: a stamped line, a dump or scrape timed by a
    capture header, a file name or a sample's own timestamp (not only a file's modification time,
    which a copy resets to when it was copied)."""
    t = analysis.timeline
    if t.first_ts is not None:
        return True
    stated = (pl.col("ts_confidence").cast(pl.String).fill_null("") != "low") & pl.col("ts").is_not_null()
    if t.stacks.filter(stated).height:
        return True
    return bool(t.samples.filter(stated | pl.col("sample_ts").is_not_null()).select(pl.len()).collect().item())


def no_time_axis(analysis: Analysis) -> str | None:
    """Why no time axis is drawn (None: the evidence has times of its own): what came without a
    time, and what the only times there are say."""
    if own_time(analysis):
        return None
    t = analysis.timeline
    dumps = t.stacks.select("source_file", "dump").unique().height if t.stacks.height else 0
    scrapes = (t.samples.select(pl.col("source_file").cast(pl.String), "scrape").unique().collect().height)
    lines = t.events.height
    said = [f"{n:,} {what}{'s' if n > 1 else ''} {why}" for n, what, why in (
        (dumps, "py-spy dump", "without a capture header"), (scrapes, "scrape", "without a capture header"),
        (lines, "log line", "without a time stamp")) if n]
    copied = [x for x in (t.stacks.get_column("ts").min() if t.stacks.height else None,
                          t.samples.select(pl.col("ts").min()).collect().item()) if isinstance(x, datetime)]
    when = (f" Their files' modification times ({min(copied):%Y-%m-%d %H:%M} UTC) say when they were copied, "
            "not when the evidence was taken, so none is used.") if copied else ""
    return ("No time axis: nothing in this bundle carries a time of its own (" + (", ".join(said) or "no evidence")
            + ")." + when)


def axis_for(analysis: Analysis, max_buckets: int = MAX_BUCKETS) -> Axis:
    """The incident's span (window if declared, else the evidence's) and a bucket giving at most
    `max_buckets` buckets."""
    incident = analysis.timeline.incident
    t = analysis.timeline
    times: list[datetime] = []
    for column in (t.stacks.get_column("ts"), t.samples.select(pl.col("ts")).collect().get_column("ts")):
        times += [x for x in (column.min(), column.max()) if isinstance(x, datetime)]
    times += [x for x in (t.first_ts, t.last_ts) if isinstance(x, datetime)]
    times += [f.at for f in analysis.findings if f.at] + [f.until for f in analysis.findings if f.until]
    start, end = (incident.window if incident.window else (min(times), max(times))) if times or incident.window else (
        datetime.now().astimezone(), datetime.now().astimezone())
    if (end - start).total_seconds() < MIN_SPAN_S:  # a bundle of one dump or one scrape: a window around it
        middle = start + (end - start) / 2
        start, end = middle - timedelta(seconds=MIN_SPAN_S / 2), middle + timedelta(seconds=MIN_SPAN_S / 2)
    seconds = max((end - start).total_seconds(), 1.0)
    bucket = next((b for b in BUCKETS if seconds / b <= max_buckets), BUCKETS[-1])
    return Axis(start, end, bucket, analysis.display_zone)


def x_range(axis: Axis) -> list[datetime]:
    """The axis' span with a margin either side, as wall-clock times: set whatever is drawn, so one
    py-spy round alone is not a 12-second axis."""
    margin = (axis.end - axis.start) * X_MARGIN
    return [wall_time(axis.start - margin, axis.zone), wall_time(axis.end + margin, axis.zone)]


def wall(column: str | pl.Expr, zone: str) -> pl.Expr:
    """A UTC time column as the display zone's wall-clock time, naive (what plotly draws)."""
    expr = pl.col(column) if isinstance(column, str) else column
    return expr.dt.convert_time_zone(zone).dt.replace_time_zone(None)


def wall_ms(column: str | pl.Expr, zone: str) -> pl.Expr:
    """Wall-clock time as milliseconds since the epoch (float): dense series travel as base64
    numbers instead of one ISO string per point; the figure's x axes are typed "date"."""
    return wall(column, zone).dt.epoch("ms").cast(pl.Float64)


def wall_time(at: datetime, zone: str) -> datetime:
    """One UTC time as the display zone's naive wall-clock time."""
    from zoneinfo import ZoneInfo
    return at.astimezone(ZoneInfo(zone)).replace(tzinfo=None)


def duration_words(seconds: int) -> str:
    return f"{seconds} s" if seconds < 60 else (f"{seconds // 60} min" if seconds < 3600 else f"{seconds // 3600} h")


def no_samples(fig: go.Figure, row: int | None, sentence: str) -> None:
    """An empty panel: the sentence where the data would be, and no axes ticking an empty range."""
    where = {"row": row, "col": 1} if row is not None else {}
    ref = "" if row in (None, 1) else str(row)
    fig.update_xaxes(showticklabels=row is not None, **where)
    fig.update_yaxes(showticklabels=False, showgrid=False, zeroline=False, range=[0, 1], **where)
    fig.add_annotation(text=sentence, showarrow=False, font={"size": 12, "color": "#666"},
                       xref=f"x{ref} domain", yref=f"y{ref} domain", x=0.5, y=0.5)


LABEL_CHARS = 40  # a key time's or an annotation's label on the timeline, at most
LABEL_PX_PER_CHAR = 6.2  # 10 px system-ui, measured in Chromium


def label_rows(marks: list[tuple[datetime, str, str]], axis: Axis) -> list[int]:
    """A row for each label so that none covers another at the narrowest layout: labels in time
    order, each on the first row whose last label ends before it starts (greedy interval colouring)."""
    span_s = max((axis.end - axis.start).total_seconds(), 1.0)
    seconds_per_px = span_s / NARROWEST_PLOT_PX
    ends: list[float] = []  # per row, where its last label ends (seconds from the axis start)
    rows = [0] * len(marks)
    for index in sorted(range(len(marks)), key=lambda i: marks[i][0]):
        at, text, _ = marks[index]
        start = (at - axis.start).total_seconds()
        width = (min(len(text), LABEL_CHARS) * LABEL_PX_PER_CHAR + 12) * seconds_per_px
        row = next((r for r, end in enumerate(ends) if end <= start), len(ends))
        if row == len(ends):
            ends.append(0.0)
        ends[row] = start + width
        rows[index] = row
    return rows
