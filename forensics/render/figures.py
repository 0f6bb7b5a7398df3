"""Plotly figures of an analysis: the timeline, metric panels, stack phases and icicles, errors.

The timeline has one swimlane per host / component / rank: a heat strip of progress lines per
time bucket (a freeze is where the strip goes blank), warnings and line kinds as markers sized
by their count per bucket, every lifecycle message, the py-spy phase of every rank at its capture
time, one lane per symptom track with every finding (a bar for a window), and a dashed line per
annotation and key time across every panel. The profile's `[[metrics.panel]]` charts share its
time axis. Dense series are bucketed so that a figure's size depends on the number of lanes and
series, not on the number of records; lifecycle messages, findings, error templates and
annotations are never dropped.

Times are drawn as the display zone's wall-clock time (plotly has no time zones): storage stays
UTC, the axis title names the zone. Every string from the evidence goes through
`forensics.render.text.hover` (redacted when asked, always escaped).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from forensics.analyze import Analysis
from forensics.detect import errors, failures, span
from forensics.detect.lifecycle import FAILED, RESTART_SCHEDULED, STARTED, STARTING, STOPPED, STOPPING
from forensics.detect.stacks import Verdict
from forensics.timeline.metrics import counter_rates, named, one_copy_per_engine
from forensics.profiles import MetricPanel
from forensics.render.text import Redact, hover, shorten


LIFECYCLE_IDS = {STARTING: "starting", STARTED: "started", STOPPING: "stopping", STOPPED: "stopped",
                 FAILED: "failed", RESTART_SCHEDULED: "restart scheduled"}
BUCKETS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)  # seconds
MAX_BUCKETS = 400  # per lane on the timeline
POINT_BUDGET = 60_000  # metric points over all panels; more series means coarser buckets
MAX_CELLS = 300_000  # progress-strip cells (lanes × buckets); more lanes means coarser buckets
OTHER_PANELS = 3  # panels for families the profile does not draw, those that moved most
MAX_SERIES = 48  # per panel; beyond it, instances no finding names are folded into a median
MIN_SPAN_S = 600.0  # the narrowest time axis: ten minutes around evidence that covers less
X_MARGIN = 0.02  # of the span, either side: markers at the window's edges are drawn whole
HOVER_CELLS = 40_000  # swimlane cells that carry their lane's name in the hover (past that, the page grows)
PHASE_COLOURS = {"collective": "#d62728", "idle": "#1f77b4", "transfer": "#9467bd", "compute": "#2ca02c",
                 "device_sync": "#8c564b", "network": "#e377c2", "unknown": "#7f7f7f"}
KEY_TIME_COLOURS = {"started": "#d62728", "detected": "#ff7f0e", "mitigated": "#9467bd", "resolved": "#2ca02c"}
ERROR_KINDS_COLOUR = "#d62728"
LANE_CHARS = 44  # a lane's name on the axis; longer ones lose their middle
LANE_PX = 22  # a swimlane's height
# the narrowest swimlane plot a page gives (1280 px wide): how many seconds a label covers is reckoned on it
NARROWEST_PLOT_PX = 650
MARKER_HALF_PX = 12.5  # half the biggest swimlane marker (the error crosses)
LEGEND_SERIES = 16  # more metric series than this are told apart by their hover, not a legend


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


def rank_label() -> pl.Expr:
    """`DP0 PP1 TP3` from a line's scheduler tag (null when it names no rank)."""
    parts = [pl.when(pl.col(f"line_{k}").is_not_null()).then(pl.format(f"{k.upper()}{{}}", pl.col(f"line_{k}")))
             for k in ("dp", "pp", "tp")]
    return pl.concat_str(parts, separator=" ", ignore_nulls=True).replace("", None)


def lane_expr() -> pl.Expr:
    """The swimlane of an event: host · component (or unit) · rank."""
    what = pl.coalesce(pl.col("component"), pl.col("identifier"),
                       pl.col("unit").cast(pl.String).str.replace(r"\.service$", ""), pl.lit("?"))
    # a line with no host (a plain log file) is named by its file alone, not by "?"
    return pl.concat_str([pl.col("host"), what, rank_label()], separator=" · ",
                         ignore_nulls=True).alias("lane")


def stack_lane(host: str | None, group: str, label: str) -> str:
    """The swimlane of a py-spy rank: host · group · rank, as `lane_expr` names a log line's."""
    return " · ".join(part for part in (host, group, label) if part)


def _lane_order(lanes: list[str], involved: set[str | None]) -> list[str]:
    """Lanes of hosts that findings or stacks name first, then the rest, each by name with its
    numbers compared as numbers (TP8 before TP10, node-2 before node-10)."""
    return sorted(set(lanes), key=lambda lane: (lane.split(" · ", 1)[0] not in involved, natural_key(lane)))


def natural_key(text: str) -> list[str | int]:
    """`text` cut into words and numbers, the numbers compared by value: "TP10" after "TP8"."""
    return [int(part) if n % 2 else part for n, part in enumerate(re.split(r"([0-9]+)", text))]


@dataclass(frozen=True)
class Mark:
    """Events a person asked to see on the timeline: a lane of markers for the rows `where` picks."""

    label: str
    where: pl.Expr


def marked_rows(analysis: Analysis, events: pl.DataFrame, where: pl.Expr) -> pl.DataFrame:
    """`ts`, `message` and `lane` of the timeline's events `where` picks. A lean timeline (a big
    case) holds neither the routine lines nor their text: `where` is then run over the case's own
    records (all of their text) and what it picks read onto the timeline; a `where` naming a column
    only the timeline has (component, progress, …) runs on the lines the timeline holds."""
    timeline = analysis.timeline
    if not timeline.lean or timeline.case is None:
        return events.filter(where).select("ts", "message", "lane")
    try:
        picked = timeline.case.events.filter(where).collect()
    except pl.exceptions.ColumnNotFoundError:
        return events.filter(where).select("ts", "message", "lane")
    return timeline.placed(picked).with_columns(lane_expr()).select("ts", "message", "lane")


def timeline_figure(analysis: Analysis, redact: Redact | None = None, max_buckets: int = MAX_BUCKETS,
                    extra_panels: Sequence[MetricPanel] = (), marks: Sequence[Mark] = ()) -> go.Figure:
    """The interactive timeline: swimlanes on top, the profile's metric panels below, one time axis;
    `extra_panels` and `marks` are what a notebook cell added (`ReportSession.add_panel` / `mark`)."""
    axis = axis_for(analysis, max_buckets)
    panels = metric_panels(analysis, axis, extra_panels)
    events = analysis.timeline.events.with_columns(lane_expr())
    marked = [(mark, marked_rows(analysis, events, mark.where)) for mark in marks]
    stack_lanes = [stack_lane(r.host, r.group, r.label) for v in analysis.verdicts for r in v.ranks]
    track_lanes = [f"track · {t.name}" for t in analysis.tracks]
    involved = {f.host for f in analysis.findings if f.host} | {r.host for v in analysis.verdicts for r in v.ranks}
    # every line's lane, the routine lines a lean timeline only counts included
    logged = analysis.timeline.activity.select(lane_expr()).get_column("lane").unique().to_list()
    checks = health_lines(events)
    health = checks.get_column("lane").unique().to_list()
    lanes = ([f"mark · {mark.label}" for mark in marks] + track_lanes
             + _lane_order(logged + stack_lanes + health, involved))
    progress_counts = analysis.timeline.progress_counts.with_columns(lane_expr())
    logging = set(progress_counts.get_column("lane").unique().to_list())
    quiet = {lane for lane in lanes if lane not in logging and " · TP" in lane
             and any(other.rsplit(" · ", 1)[0] == lane.rsplit(" · ", 1)[0] for other in logging)}
    # a rank whose engine logs its batches on another rank (SGLang: TP0) is not frozen for lacking them
    # one line per lane (a wrapped name runs into the next lane); the full name is in each cell's hover
    shown = [hover(shorten((redact(lane) or "") if redact else lane, LANE_CHARS)
                   + (" (logs no batches)" if lane in quiet else ""), None, 200) for lane in lanes]
    # lanes are numbered (top lane highest) rather than categorical: plotly.js fails on a heatmap
    # whose categories are a subset of the axis' category array
    lane_y = {lane: len(lanes) - 1 - n for n, lane in enumerate(lanes)}
    lane_rows = max(len(lanes), 4)
    heights = [lane_rows * LANE_PX + 60] + [170] * len(panels)
    gap_px = 56  # between panels, room for a panel's title
    fig = make_subplots(rows=1 + len(panels), cols=1, shared_xaxes=True,
                        vertical_spacing=gap_px / (sum(heights) + gap_px * len(panels)),
                        row_heights=[h / sum(heights) for h in heights],
                        subplot_titles=["swimlanes: progress lines per " + _words(axis.bucket_s)]
                        + [panel.title for panel, _ in panels])
    _progress_strip(fig, progress_counts, axis, lane_y, redact)
    _health_checks(fig, checks, axis, lane_y, redact)
    _error_markers(fig, events, axis, lane_y, redact)
    _lifecycle_markers(fig, events, axis, lane_y, redact)
    _stack_markers(fig, analysis.verdicts, axis, lane_y, redact)
    _finding_lanes(fig, analysis, axis, lane_y, redact)
    _failure_markers(fig, analysis, axis, lane_y, redact)
    _last_batches(fig, analysis, events, axis, lane_y, redact)
    for mark, rows in marked:
        fig.add_trace(go.Scatter(
            x=[wall_time(at, axis.zone) for at in rows.get_column("ts")],
            y=[lane_y[f"mark · {mark.label}"]] * rows.height, mode="markers", name=f"mark: {hover(mark.label, redact)}",
            text=[hover(f"{lane}: {message}", redact) for message, lane in rows.select("message", "lane").iter_rows()],
            hovertemplate="%{text}<extra></extra>", marker={"symbol": "star", "size": 10}), row=1, col=1)
    for row, (panel, frame) in enumerate(panels, start=2):
        metric_panel(fig, frame, row, redact, unit=panel.axis_title)
        top = fig.layout[f"yaxis{row}"].domain[1]
        fig.update_layout({f"legend{row}": {"y": top, "yanchor": "top", "x": 1.01, "xanchor": "left",
                                            "font": {"size": 9}, "bgcolor": "rgba(255,255,255,0.6)"}})
    _vertical_marks(fig, analysis, axis, redact)
    if not lanes:
        no_samples(fig, 1, "no log lines and no stacks in this bundle")
    fig.update_yaxes(tickmode="array", tickvals=[lane_y[lane] for lane in lanes], ticktext=shown,
                     range=[-0.6, len(lanes) - 0.4], showgrid=False, zeroline=False, row=1, col=1, automargin=True)
    fig.update_xaxes(type="date", range=x_range(axis))
    fig.update_xaxes(title_text=f"time ({axis.zone})", row=1 + len(panels), col=1)
    fig.update_xaxes(showspikes=True, spikemode="across", spikesnap="cursor", spikethickness=1, spikecolor="#999",
                     spikedash="dot")
    fig.update_layout(height=sum(heights) + gap_px * len(panels) + 120, hovermode="closest", template="plotly_white",
                      margin={"l": 10, "r": 240 if panels else 60, "t": 60, "b": 40},
                      legend={"orientation": "h", "yanchor": "bottom", "y": 1.01, "x": 0})
    return fig


OVERVIEW_COLOURS = {"progress": "#5aae61", "frozen": "#d73027"}


def overview_figure(analysis: Analysis, redact: Redact | None = None) -> go.Figure:
    """The incident at a glance, for the report's first screen: a bar per component that logs
    progress, green while it did and red while it was frozen, under the key times."""
    axis = axis_for(analysis)
    counts = analysis.timeline.progress_counts.filter(pl.col("component").is_not_null())
    spans = (counts.group_by("component").agg(pl.col("first").min(), pl.col("last").max()).sort("component"))
    freezes = {f.component: f for f in analysis.findings if f.kind == "frozen" and f.at}
    bars: list[tuple[str, str, datetime, datetime]] = []  # component, state, from, to
    for component, first, last in spans.iter_rows():
        freeze = freezes.get(component)
        if freeze is None or freeze.at is None:
            bars.append((component, "progress", first, last))
            continue
        until = freeze.until or axis.end
        bars += [(component, "progress", first, freeze.at), (component, "frozen", freeze.at, until)]
        if last > until:
            bars.append((component, "progress", until, last))
    fig = go.Figure()
    for state, colour in OVERVIEW_COLOURS.items():
        mine = [b for b in bars if b[1] == state and b[3] > b[2]]
        if not mine:
            continue
        fig.add_trace(go.Bar(
            y=[hover(c, redact) for c, _, _, _ in mine], base=[wall_time(a, axis.zone) for _, _, a, _ in mine],
            x=[(b - a).total_seconds() * 1000 for _, _, a, b in mine], orientation="h", name=state,
            marker={"color": colour}, width=0.5,
            customdata=[hover(f"{c} {state if state == 'frozen' else 'making progress'} "
                              f"{wall_time(a, axis.zone):%H:%M:%S}–{wall_time(b, axis.zone):%H:%M:%S} "
                              f"({span((b - a).total_seconds())})", redact) for c, _, a, b in mine],
            hovertemplate="%{customdata}<extra></extra>"))
    marks = [(at, f"{name} {wall_time(at, axis.zone):%H:%M:%S}", colour)
             for name, colour in KEY_TIME_COLOURS.items() if (at := getattr(analysis.key_times, name))]
    label_rows = _label_rows(marks, axis)
    for (at, text, colour), row in zip(marks, label_rows, strict=True):
        fig.add_vline(x=wall_time(at, axis.zone), line={"dash": "dash", "width": 1, "color": colour})
        # each key time labelled above the strip, rows stacked so that no label covers another
        fig.add_annotation(x=wall_time(at, axis.zone), y=1.0, yref="paper", yanchor="bottom", yshift=2 + 15 * row,
                           showarrow=False, text=text, font={"size": 10, "color": colour}, xanchor="left",
                           bgcolor="rgba(255,255,255,0.85)", name="key-time")
    fig.update_xaxes(type="date", range=x_range(axis))
    fig.update_yaxes(autorange="reversed")
    rows = max(spans.height, 1)
    label_px = 15 * (max(label_rows, default=-1) + 1)
    plot_px = 40 + 34 * rows
    # the legend under the time axis and its date line (about 45 px down), not over the labels
    fig.update_layout(height=plot_px + 85 + 10 + label_px, barmode="overlay", template="plotly_white", showlegend=True,
                      legend={"orientation": "h", "yanchor": "top", "y": -50 / plot_px, "x": 0},
                      margin={"l": 10, "r": 10, "t": 10 + label_px, "b": 85})
    return fig


def _words(seconds: int) -> str:
    return f"{seconds} s" if seconds < 60 else (f"{seconds // 60} min" if seconds < 3600 else f"{seconds // 3600} h")


def _progress_strip(fig: go.Figure, progress_counts: pl.DataFrame, axis: Axis, lane_y: dict[str, int],
                    redact: Redact | None) -> None:
    """Progress lines per bucket and lane (from the timeline's per-second counts) as a heatmap."""
    counts = (progress_counts.group_by(pl.col("second").dt.truncate(axis.every).alias("bucket"), "lane")
              .agg(pl.col("lines").sum().alias("len")))
    if counts.is_empty():
        return
    # one row per lane, every lane present: a heatmap cell spans half-way to the next row given,
    # so a missing lane would be painted by its neighbours; 0 draws transparent
    span_s = max((axis.end - axis.start).total_seconds(), 1.0)
    every = next((f"{b}s" for b in BUCKETS if b >= axis.bucket_s and len(lane_y) * span_s / b <= MAX_CELLS),
                 f"{BUCKETS[-1]}s")
    if every != axis.every:
        counts = counts.with_columns(pl.col("bucket").dt.truncate(every)).group_by("bucket", "lane").agg(
            pl.col("len").sum())
    buckets = pl.datetime_range(axis.start, axis.end, every, time_zone="UTC", eager=True)
    buckets = buckets.dt.truncate(every).unique().sort()
    cells = (counts.join(buckets.to_frame("bucket").with_row_index("column"), on="bucket")
             .select(pl.col("lane").replace_strict(lane_y, return_dtype=pl.Int64), "column",
                     pl.col("len").clip(upper_bound=65535)))
    z = np.zeros((len(lane_y), buckets.len()), dtype=np.uint16)
    z[cells.get_column("lane").to_numpy(), cells.get_column("column").to_numpy()] = cells.get_column("len").to_numpy()
    top = float(np.percentile(z[z > 0], 95)) if (z > 0).any() else 1.0
    names = {y: hover(lane, redact, 60) for lane, y in lane_y.items()}
    # the lane's name in the hover of every cell that has lines (empty cells show nothing), redacted
    # as the rest of the page; past HOVER_CELLS cells the page would grow, so the name is left out
    text = ([[names[y] if count else "" for count in z[y]] for y in range(len(lane_y))]
            if len(lane_y) * buckets.len() <= HOVER_CELLS else None)
    fig.add_trace(go.Heatmap(
        x=buckets.to_frame("b").select(wall_ms("b", axis.zone)).to_series().to_numpy(), y=list(range(len(lane_y))), z=z,
        zmin=0, zmax=max(top, 1.0), showscale=True, name="progress lines", xgap=0, ygap=2, text=text,
        colorbar={"title": {"text": f"batch lines<br>per {_words(int(every[:-1]))}", "side": "top"},
                  # in pixels: a fraction of the figure shrank it into its own title on short figures
                  "thickness": 10, "lenmode": "pixels", "len": 110, "y": 1.0, "yanchor": "top", "x": 1.0, "xpad": 4},
        colorscale=[[0, "rgba(0,0,0,0)"], [0.5 / max(top, 1.0), "rgba(0,0,0,0)"], [0.5 / max(top, 1.0), "#c7e9c0"],
                    [1, "#006d2c"]], xhoverformat="%Y-%m-%d %H:%M:%S",
        hovertemplate=("%{text}<br>" if text else "") + "%{x}: %{z} progress lines<extra></extra>"), row=1, col=1)


def _last_batches(fig: go.Figure, analysis: Analysis, events: pl.DataFrame, axis: Axis, lane_y: dict[str, int],
                  redact: Redact | None) -> None:
    """A labelled marker where each frozen component's progress ends ("decode last batch 21:34:47")."""
    points = []
    for f in analysis.findings:
        if f.kind != "frozen" or f.at is None:
            continue
        rows = events.filter((pl.col("ts") == f.at) & pl.col("progress").is_not_null()
                             & pl.col("component").eq_missing(f.component)).select("lane")
        if rows.height and rows.item(0, 0) in lane_y:
            points.append((f, rows.item(0, 0)))
    if not points:
        return
    xs, ys = [wall_time(f.at, axis.zone) for f, _ in points if f.at], [lane_y[lane] for _, lane in points]
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name="last batch before a freeze", hoverinfo="skip",
                             marker={"symbol": "line-ns", "size": 16, "line": {"width": 3, "color": "#b2182b"}}),
                  row=1, col=1)
    # plotly's closest hover ranks a point under the mouse by 1 - 3 px / its radius, so the error
    # markers of the same seconds would win over a big marker: the hover sits on a 3 px point
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name="last batch (hover)", showlegend=False,
                             hovertext=[hover(f.text, redact) for f, _ in points],
                             hovertemplate="%{hovertext}<extra></extra>",
                             marker={"size": 6, "color": "rgba(178,24,43,0.01)"}), row=1, col=1)
    # the label sits beside the marker, a short line pointing at it, on the side no other marker is
    # (annotations are drawn over every trace: a label over an error cross would hide it)
    drawn = _marker_points(fig)
    for f, lane in points:
        at = wall_time(f.at, axis.zone)
        # a log that names no component (a plain server.log) is named by its lane, never as "None"
        text = f"{f.component or lane} last batch {at:%H:%M:%S}"
        ax, ay = _label_side(at, lane_y[lane], len(text), drawn, axis)
        fig.add_annotation(x=at, y=lane_y[lane], xref="x", yref="y", text=hover(text, redact),
                           showarrow=True, arrowhead=0, arrowcolor="#b2182b", ax=ax, ay=ay,
                           xanchor="right" if ax < 0 else "left", font={"size": 11, "color": "#b2182b"},
                           bgcolor="rgba(255,255,255,0.9)", name="last-batch")


def _wall_ms(x: object) -> float | None:
    """A swimlane x value in milliseconds of wall-clock time: dense traces carry them as numbers
    (`wall_ms`), the others as naive wall-clock datetimes (`wall_time`)."""
    if isinstance(x, datetime):
        return x.replace(tzinfo=UTC).timestamp() * 1000
    return float(x) if isinstance(x, (int, float, np.floating, np.integer)) else None


def _marker_points(fig: go.Figure) -> list[tuple[float, float]]:
    """Every marker drawn so far on the swimlanes: its wall-clock time (ms) and lane number."""
    out = []
    for trace in fig.data:
        if trace.type != "scatter" or "markers" not in (trace.mode or "") or trace.x is None or trace.y is None:
            continue
        out += [(ms, float(y)) for ms, y in ((_wall_ms(x), y) for x, y in zip(trace.x, trace.y, strict=False))
                if ms is not None and isinstance(y, (int, float, np.integer, np.floating))]
    return out


def _label_side(at: datetime, lane: int, chars: int, drawn: list[tuple[float, float]], axis: Axis
                ) -> tuple[int, int]:
    """The label's offset from its marker (plotly's ax, ay in pixels): up-left unless a marker lies
    under it there, then up-right, down-left, down-right, then the same with longer lines; the
    place with the fewest markers under it otherwise. Pixels are reckoned on the narrowest plot a page
    gives, so wider pages only leave more room."""
    span_s = max((axis.end - axis.start).total_seconds() * (1 + 2 * X_MARGIN), 1.0)
    px_per_s = NARROWEST_PLOT_PX / span_s
    width = chars * 6.5 + 8  # an 11 px font's characters and the box's padding
    at_ms = _wall_ms(at) or 0.0
    counts = {}
    # a rise of 20 px keeps the box between its own lane's markers and the next lane's centre
    for ax, ay in ((-14, -20), (14, -20), (-14, 20), (14, 20), (-44, -20), (44, -20), (-44, 20), (44, 20),
                   (-80, -20), (80, -20), (-80, 20), (80, 20)):
        left, right = (ax - width, ax) if ax < 0 else (ax, ax + width)
        top, bottom = ay - 7.5, ay + 7.5  # the label's box, relative to the marker (down is positive)
        counts[(ax, ay)] = sum(
            1 for x, y in drawn
            if left - MARKER_HALF_PX < (x - at_ms) / 1000 * px_per_s < right + MARKER_HALF_PX
            and top - MARKER_HALF_PX < (lane - y) * LANE_PX < bottom + MARKER_HALF_PX
            and not (x == at_ms and y == lane))
    return min(counts, key=lambda side: (counts[side] > 0, counts[side]))


HEALTH = {"answered": ("#5aae61", "square"), "failed": (ERROR_KINDS_COLOUR, "square-x")}
HEALTH_LANE = " · health checks"


def health_lines(events: pl.DataFrame) -> pl.DataFrame:
    """Access lines of health checks (answered OK by the profile's `health_ok`, or a /health
    request with a status), each in its component's health lane (beside, not over, its log)."""
    if "http_path" not in events.columns:
        return events.clear().select("ts", "lane", "health_ok")
    return (events.filter(pl.col("health_ok") | (pl.col("http_path").str.starts_with("/health")
                                                 & pl.col("http_status").is_not_null()))
            .select("ts", pl.col("lane") + HEALTH_LANE, "health_ok"))


def _health_checks(fig: go.Figure, lines: pl.DataFrame, axis: Axis, lane_y: dict[str, int],
                   redact: Redact | None) -> None:
    """Health checks per minute in the lane of the log that answered them: answered OK (the
    profile's `health_ok`) and answered otherwise (a /health request with another status). A
    frozen engine answering 200 is the blind spot the report names; here it is seen."""
    checks = (lines.group_by(pl.col("ts").dt.truncate("1m").alias("minute"), "lane")
              .agg(pl.col("health_ok").sum().alias("answered"), (~pl.col("health_ok")).sum().alias("failed"))
              .sort("minute", "lane"))
    for state, (colour, symbol) in HEALTH.items():
        rows = checks.filter(pl.col(state) > 0)
        if rows.is_empty():
            continue
        x = rows.select(wall_ms(pl.col("minute") + pl.duration(seconds=30), axis.zone)).to_series().to_numpy()
        text = [hover(f"{lane}: {n} health check{'s' if n > 1 else ''} {'answered OK' if state == 'answered' else 'failed'} "
                      f"in the minute from {wall_time(minute, axis.zone):%H:%M}", redact)
                for minute, lane, n in rows.select("minute", "lane", state).iter_rows()]
        fig.add_trace(go.Scatter(
            x=x, y=[lane_y[lane] for lane in rows.get_column("lane")], mode="markers",
            name=f"health checks {'answered OK' if state == 'answered' else 'failed'} (per minute)",
            text=text, hovertemplate="%{text}<extra></extra>", customdata=rows.get_column(state).to_list(),
            marker={"symbol": symbol, "size": 7, "color": colour, "line": {"width": 0}}), row=1, col=1)


def _error_markers(fig: go.Figure, events: pl.DataFrame, axis: Axis, lane_y: dict[str, int],
                   redact: Redact | None) -> None:
    notable = (events.filter((pl.col("priority") <= errors.WARNING) | pl.col("event").is_not_null())
               .with_columns(errors.template(pl.col("message")).alias("template"))
               .group_by(pl.col("ts").dt.truncate(axis.every).alias("bucket"), "lane", "template")
               .agg(pl.len().alias("n"), pl.col("message").first(), pl.col("event").first(), pl.col("ts").min())
               .sort("ts", "lane", "template"))  # ties broken: the same figure every time
    if notable.is_empty():
        return
    x = notable.select(wall_ms("ts", axis.zone)).to_series().to_numpy()
    text = [hover(f"{n} × {event or 'warning or worse'} in this {_words(axis.bucket_s)}: {message}", redact)
            for n, event, message in notable.select("n", "event", "message").iter_rows()]
    sizes = notable.select((pl.col("n").log(2) * 3 + 7).clip(7, 22)).to_series().to_list()
    fig.add_trace(go.Scatter(x=x, y=[lane_y[v] for v in notable.get_column("lane")], mode="markers",
                             name="errors and notable lines", text=text, hovertemplate="%{text}<extra></extra>",
                             marker={"symbol": "x", "color": ERROR_KINDS_COLOUR, "size": sizes, "opacity": 0.8}),
                  row=1, col=1)


def _lifecycle_markers(fig: go.Figure, events: pl.DataFrame, axis: Axis, lane_y: dict[str, int],
                       redact: Redact | None) -> None:
    rows = events.filter(pl.col("message_id").is_in(list(LIFECYCLE_IDS))
                         | pl.col("message").str.contains(r"COMMAND=\S*systemctl\s")).sort("ts")
    if rows.is_empty():
        return
    times = rows.select(wall("ts", axis.zone)).to_series().to_list()
    said = [f"{at:%H:%M:%S} {LIFECYCLE_IDS.get(mid or '', 'command')}: {message}"
            for at, (mid, message) in zip(times, rows.select("message_id", "message").iter_rows(), strict=True)]
    # events of one lane a few seconds apart (stopping, stopped, started) draw on one spot: each
    # marker's hover lists every event of its lane and time bucket, each with its own time
    buckets = rows.select(pl.col("lane"), pl.col("ts").dt.truncate(axis.every).alias("bucket")).rows()
    together: dict[tuple[Any, ...], list[str]] = {}
    for key, text in zip(buckets, said, strict=True):
        together.setdefault(key, []).append(text)
    fig.add_trace(go.Scatter(
        x=times, y=[lane_y[v] for v in rows.get_column("lane")], mode="markers", name="lifecycle (systemd, sudo)",
        text=[hover("\n".join(together[key]), redact, max_lines=16) for key in buckets],
        hovertemplate="%{text}<extra></extra>",
        marker={"symbol": "triangle-up", "size": 12, "color": "#9467bd", "line": {"width": 1, "color": "white"}}),
        row=1, col=1)


def _stack_markers(fig: go.Figure, verdicts: list[Verdict], axis: Axis, lane_y: dict[str, int],
                   redact: Redact | None) -> None:
    for phase in sorted({r.phase.phase for v in verdicts for r in v.ranks}):
        ranks = [(v, r) for v in verdicts for r in v.ranks if r.phase.phase == phase and r.ts]
        fig.add_trace(go.Scatter(
            x=[wall_time(r.ts, axis.zone) for _, r in ranks if r.ts],
            y=[lane_y[stack_lane(r.host, r.group, r.label)] for _, r in ranks],
            mode="markers", name=f"py-spy: {phase}",
            text=[hover(f"{v.verdict} ({v.group}, round {v.round + 1}): {r.label} {phase} in "
                        f"{r.phase.frame.function if r.phase.frame else '?'}"
                        + (f" called from {r.phase.caller.function}" if r.phase.caller else "")
                        + f" — {r.source}", redact) for v, r in ranks],
            hovertemplate="%{text}<extra></extra>",
            marker={"symbol": "diamond", "size": 13, "color": PHASE_COLOURS.get(phase, "#7f7f7f"),
                    "line": {"width": 1, "color": "black"}}), row=1, col=1)


# One symbol per failure mode (the layer profiles' `fault`), drawn over its track's lane.
FAULT_SYMBOLS = {"collective timeout": "hourglass", "device fault": "bowtie", "out of memory": "star-triangle-down",
                 "crash loop": "circle-cross", "process ended": "x-thin-open", "transport failure": "hexagram",
                 "kernel hang": "hourglass-open", "disk full": "square-x-open", "capacity": "triangle-down-open",
                 "platform": "pentagon-open"}
FAULT_COLOUR = "#b2182b"


def _failure_markers(fig: go.Figure, analysis: Analysis, axis: Axis, lane_y: dict[str, int],
                     redact: Redact | None) -> None:
    """The failure-mode findings (collective timeouts, device faults, OOM, crash loops, start-ups
    that failed, stalled or died, stuck stacks) as their own markers over their track's lane."""
    faults = {e.kind: e.fault for e in analysis.timeline.profile.logs.events if e.fault}
    modes = [f for f in failures.headline(analysis.reported()) if f.at and f"track · {f.track}" in lane_y]
    for fault in sorted({faults.get(f.kind, f.kind.replace("_", " ")) for f in modes}):
        mine = [f for f in modes if faults.get(f.kind, f.kind.replace("_", " ")) == fault]
        fig.add_trace(go.Scatter(
            x=[wall_time(f.at, axis.zone) for f in mine if f.at], y=[lane_y[f"track · {f.track}"] for f in mine],
            mode="markers", name=f"failure: {fault}", text=[hover(f"[{f.kind}] {f.text}", redact) for f in mine],
            hovertemplate="%{text}<extra></extra>",
            marker={"symbol": FAULT_SYMBOLS.get(fault, "diamond-wide"), "size": 16, "color": FAULT_COLOUR,
                    "line": {"width": 1.5, "color": "black"}}), row=1, col=1)


def track_colour(analysis: Analysis, track: str) -> str:
    """The main track's colour is the first of TRACK_COLOURS in every report; others by name."""
    main = analysis.timeline.profile.logs.main_track
    return TRACK_COLOURS[0] if track == main else stable_colour(track, TRACK_COLOURS[1:])


def _finding_lanes(fig: go.Figure, analysis: Analysis, axis: Axis, lane_y: dict[str, int],
                   redact: Redact | None) -> None:
    for track in analysis.tracks:
        lane = lane_y[f"track · {track.name}"]
        colour = track_colour(analysis, track.name)
        points = [f for f in track.findings if f.at]
        fig.add_trace(go.Scatter(
            x=[wall_time(f.at, axis.zone) for f in points if f.at], y=[lane] * len(points), mode="markers",
            name=f"findings: {track.name}", text=[hover(f"[{f.kind}] {f.text}", redact) for f in points],
            hovertemplate="%{text}<extra></extra>", marker={"symbol": "circle", "size": 11, "color": colour}),
            row=1, col=1)
        windows = [f for f in points if f.until and f.at and f.until > f.at]
        if windows:
            xs: list[datetime | None] = []
            for f in windows:
                xs += [wall_time(f.at, axis.zone), wall_time(f.until, axis.zone), None]  # type: ignore[arg-type]
            fig.add_trace(go.Scatter(x=xs, y=[lane, lane, None] * len(windows), mode="lines", showlegend=False,
                                     hoverinfo="skip", line={"width": 6, "color": colour}, opacity=0.35),
                          row=1, col=1)


def metric_frame(analysis: Analysis, gauges: tuple[str, ...], rates: tuple[str, ...], axis: Axis,
                 budget_points: int) -> pl.DataFrame:
    """Gauges as they are and counters as per-second rates, one series per instance and name
    (one copy per engine: the TP ranks' copies of its counters count once; DP ranks and other
    labels summed for rates, the maximum taken for gauges), bucketed so that
    all series together stay under `budget_points` points. Columns: series, x (wall time in epoch
    ms, see `wall_ms`), value."""
    samples = analysis.timeline.samples
    frames = []
    if gauges:
        frames.append(samples.filter(named(list(gauges)))
                      .select(pl.coalesce("sample_ts", "ts").alias("at"), instance_name(),
                              pl.col("name").cast(pl.String), "value")
                      .group_by("at", "instance", "name").agg(pl.col("value").max()).collect())
    if rates:
        frames.append(counter_rates(one_copy_per_engine(samples.filter(named(list(rates)))
                                                        .with_columns(instance_name())))
                      .group_by(pl.col("end").alias("at"), "instance", "name")
                      .agg(pl.col("rate").sum().alias("value"))
                      .with_columns(pl.col("name") + "/s"))
    if not frames:
        return pl.DataFrame(schema={"series": pl.String, "x": pl.Float64, "value": pl.Float64})
    points = _fold_uninvolved(pl.concat(frames), analysis)
    incident, profile = analysis.timeline.incident, analysis.timeline.profile
    components = {i: incident.component_of_instance(i, profile) for i in points.get_column("instance").unique()}
    points = points.with_columns(
        pl.format("{} {} {}", pl.col("instance").replace_strict(components, default=None, return_dtype=pl.String)
                  .fill_null(""), "instance", "name").str.strip_chars().alias("series"))
    n_series = max(points.get_column("series").n_unique(), 1)
    span_s = max((axis.end - axis.start).total_seconds(), 1.0)
    per_series = max(budget_points // n_series, 30)
    bucket = next((b for b in BUCKETS if span_s / b <= per_series), BUCKETS[-1])
    return (points.group_by("series", pl.col("at").dt.truncate(f"{bucket}s").alias("bucket"))
            .agg(pl.col("value").mean())
            .sort("series", "bucket")
            .select("series", wall_ms("bucket", axis.zone).alias("x"), "value"))


def instance_name() -> pl.Expr:
    """A scrape's instance, else the name of the file it was read from (a bare `/metrics` paste
    names no instance), so no series is drawn nameless."""
    return pl.coalesce(pl.col("instance").cast(pl.String),
                       pl.col("source_file").cast(pl.String).str.split("/").list.last()).alias("instance")


def _fold_uninvolved(points: pl.DataFrame, analysis: Analysis) -> pl.DataFrame:
    """Past MAX_SERIES instance × name series, keep the instances of hosts a finding or a stack
    names and draw the others as one median line per name (a fleet's background)."""
    series = points.select("instance", "name").unique()
    if series.height <= MAX_SERIES:
        return points
    involved = {f.host for f in analysis.findings if f.host} | {r.host for v in analysis.verdicts for r in v.ranks}
    mine = pl.col("instance").str.split(":").list.first().is_in([h for h in involved if h])
    others = points.filter(~mine)
    count = others.get_column("instance").n_unique()
    folded = (others.group_by("at", "name").agg(pl.col("value").median())
              .with_columns(pl.lit(f"median of {count} other instances").alias("instance")))
    return pl.concat([points.filter(mine), folded.select(points.columns)])


def other_families(analysis: Analysis, most: int = OTHER_PANELS) -> list[tuple[str, str]]:
    """Metric families no panel of the profile draws, as (family, type), so nothing read is
    invisible: those incident.toml's `metrics` lists first, then the ones that moved most in the
    window (the spread of a gauge, or of a counter's rate, over its typical size)."""
    metrics = analysis.timeline.profile.metrics
    # the start-time gauge is drawn as restarts on the timeline, not as a line
    drawn = [n for p in metrics.panels for n in (*p.gauges, *p.rates)] + [metrics.start_time]
    samples = analysis.timeline.samples.filter(~named(drawn) if drawn else pl.lit(True))
    listed = list(analysis.timeline.incident.metrics)
    gauges = (samples.filter(pl.col("type").cast(pl.String).is_in(["gauge", "untyped", "unknown"]))
              .group_by(pl.col("name").cast(pl.String).alias("family"), pl.col("type").cast(pl.String))
              .agg(((pl.col("value").max() - pl.col("value").min()) / (pl.col("value").abs().mean() + 1e-9))
                   .alias("moved"), pl.col("ts").n_unique().alias("times"))
              .collect())
    counters = counter_rates(samples.filter(pl.col("type").cast(pl.String) == "counter"))
    moved_counters = (counters.group_by(pl.col("name").cast(pl.String).alias("family"))
                      .agg(((pl.col("rate").max() - pl.col("rate").min()) / (pl.col("rate").abs().mean() + 1e-9))
                           .alias("moved"), (pl.len() + 1).alias("times"))
                      .with_columns(pl.lit("counter").alias("type")))
    ranked = (pl.concat([gauges, moved_counters.select(gauges.columns)])
              .filter((pl.col("times") > 1) & (pl.col("moved") > 0) | pl.col("family").is_in(listed))
              .with_columns(pl.col("family").is_in(listed).alias("listed"))
              .sort(["listed", "moved"], descending=True))
    return [(f, t) for f, t in ranked.select("family", "type").head(most).iter_rows()]


def metric_panels(analysis: Analysis, axis: Axis,
                  extra: Sequence[MetricPanel] = ()) -> list[tuple[MetricPanel, pl.DataFrame]]:
    """The profile's panels that have data in this bundle, the `extra` ones asked for, then panels
    for the families no panel draws that moved most (`other_families`): (panel, `metric_frame`)."""
    panels = [*analysis.timeline.profile.metrics.panels, *extra]
    panels += [MetricPanel(f"{family} ({'per second' if kind == 'counter' else kind})",
                           () if kind == "counter" else (family,), (family,) if kind == "counter" else ())
               for family, kind in other_families(analysis)]
    budget = POINT_BUDGET // max(len(panels), 1)
    frames = [(p, metric_frame(analysis, p.gauges, p.rates, axis, budget)) for p in panels]
    # a panel whose metrics are in the bundle but give no point (one scrape: no rate) is kept, and
    # says so; a panel of metrics the bundle does not have at all is left out
    present = set(analysis.timeline.samples.select(pl.col("name").cast(pl.String)).unique().collect()
                  .get_column("name").to_list())
    return [(p, frame) for p, frame in frames
            if frame.height or any(n in present or n.replace(":", "_") in present for n in (*p.gauges, *p.rates))]


# The colour language, the same in every report: states (working green, frozen / error red,
# detected orange, lifecycle purple: OVERVIEW_COLOURS, KEY_TIME_COLOURS, ERROR_KINDS_COLOUR) never
# name a component, and a component or a track keeps its colour whatever else a report draws.
STATE_COLOURS = frozenset({*OVERVIEW_COLOURS.values(), *KEY_TIME_COLOURS.values(), ERROR_KINDS_COLOUR,
                           "#9467bd", "#b2182b"})
COMPONENT_COLOURS = {"decode": "#1f77b4", "prefill": "#8c564b", "router": "#e377c2", "engine": "#17becf"}
DASHES = ("solid", "dot", "dash", "dashdot", "longdash")
OTHER_COLOURS = ("#7f7f7f", "#bcbd22", "#393b79", "#843c39", "#6b6ecf", "#8c6d31", "#e7969c", "#9edae5")
TRACK_COLOURS = ("#393b79", "#8c6d31", "#7b4173", "#5254a3", "#636363")


def stable_colour(name: str, palette: Sequence[str]) -> str:
    """A colour of `palette` chosen by `name` alone (not by what else is drawn, nor the order)."""
    return palette[zlib.crc32(name.encode()) % len(palette)]


def series_colour(series: str) -> str:
    """A metric series' colour: its component's, else one fixed by its instance's name."""
    component = series.split(" ", 1)[0]
    return COMPONENT_COLOURS.get(component) or stable_colour(series.rsplit(" ", 1)[0], OTHER_COLOURS)


def _with_gaps(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The points with a break wherever samples are missing for more than twice their usual
    interval: a line is never drawn across a gap in the scrapes."""
    if len(x) < 3:
        return x, y
    steps = np.diff(x)
    breaks = np.flatnonzero(steps > 2 * np.median(steps))
    if not len(breaks):
        return x, y
    return (np.insert(x.astype(float), breaks + 1, x[breaks] + steps[breaks] / 2),
            np.insert(y.astype(float), breaks + 1, np.nan))


def metric_panel(fig: go.Figure, frame: pl.DataFrame, row: int, redact: Redact | None,
                 legend: bool | None = None, unit: str = "") -> None:
    """Draw one panel's `metric_frame` into row `row` of `fig`, in Grafana's manner: a legend of its
    own beside the panel (when there are few enough series to read one, or when `legend` says so),
    one colour per component in every panel, one dash per metric, gaps left as gaps, and the
    `unit` on its y axis."""
    if unit:
        fig.update_yaxes(title_text=unit, title_font={"size": 10}, row=row, col=1)
    if frame.is_empty():
        no_samples(fig, row, "no samples in this window (a rate needs two scrapes or more)")
        return
    if frame.get_column("value").min() >= 0:  # counts, rates, fractions: the axis starts at 0
        fig.update_yaxes(rangemode="tozero", row=row, col=1)
    show = legend if legend is not None else frame.get_column("series").n_unique() <= LEGEND_SERIES
    metrics = sorted({series.rsplit(" ", 1)[-1] for series in frame.get_column("series").unique().to_list()})
    for (series,), rows in frame.group_by("series", maintain_order=True):
        name = hover(series, redact, 80)
        colour = series_colour(series)
        x, y = _with_gaps(rows.get_column("x").to_numpy(), rows.get_column("value").to_numpy())
        single = rows.height == 1  # a line of one point draws nothing: a marker with its value instead
        fig.add_trace(go.Scatter(x=x, y=y, mode="markers+text" if single else "lines", name=name,
                                 text=[f"{v:.4g}" for v in y] if single else None, textposition="middle right",
                                 marker={"color": colour, "size": 9}, legendgroup=f"panel{row}",
                                 legend=f"legend{row}", connectgaps=False,
                                 line={"width": 1.5, "color": colour,
                                       "dash": DASHES[metrics.index(series.rsplit(" ", 1)[-1]) % len(DASHES)]},
                                 meta=name,  # evidence in the data, never in the template (`%{y}` in a label)
                                 hovertemplate="%{meta}<br>%{x|%Y-%m-%d %H:%M:%S}<br>%{y:.4g}<extra></extra>",
                                 showlegend=show), row=row, col=1)


def no_samples(fig: go.Figure, row: int | None, sentence: str) -> None:
    """An empty panel: the sentence where the data would be, and no axes ticking an empty range."""
    where = {"row": row, "col": 1} if row is not None else {}
    ref = "" if row in (None, 1) else str(row)
    fig.update_xaxes(showticklabels=row is not None, **where)
    fig.update_yaxes(showticklabels=False, showgrid=False, zeroline=False, range=[0, 1], **where)
    fig.add_annotation(text=sentence, showarrow=False, font={"size": 12, "color": "#666"},
                       xref=f"x{ref} domain", yref=f"y{ref} domain", x=0.5, y=0.5)


def _vertical_marks(fig: go.Figure, analysis: Analysis, axis: Axis, redact: Redact | None) -> None:
    marks: list[tuple[datetime, str, str]] = []
    for name in KEY_TIME_COLOURS:
        at = getattr(analysis.key_times, name)
        if at:
            marks.append((at, f"{name} {wall_time(at, axis.zone):%H:%M:%S}", KEY_TIME_COLOURS[name]))
    for note in analysis.timeline.incident.annotations:
        marks.append((note.at, f"✎ {note.text}", "#555555"))
    for at, text, colour in marks:
        fig.add_vline(x=wall_time(at, axis.zone), line={"dash": "dash", "width": 1, "color": colour})
    # an invisible point per mark, so that autorange takes in marks outside the data
    fig.add_trace(go.Scatter(
        x=[wall_time(at, axis.zone) for at, _, _ in marks], y=[None] * len(marks), mode="markers",
        showlegend=False, hoverinfo="skip"), row=1, col=1)
    for (at, text, colour), row in zip(marks, _label_rows(marks, axis), strict=True):
        label = text if len(text) <= LABEL_CHARS else text[:LABEL_CHARS - 1] + "…"
        fig.add_annotation(x=wall_time(at, axis.zone), y=1.0, yref="paper", yshift=-15 * row, showarrow=False,
                           text=hover(label, redact, 60, 1), font={"size": 10, "color": colour},
                           xanchor="left", bgcolor="rgba(255,255,255,0.85)")


LABEL_CHARS = 40  # a key time's or an annotation's label on the timeline, at most
NARROWEST_PLOT_PX = 560  # the swimlanes in report.html at 1280 px wide (measured): labels are laid out for it
LABEL_PX_PER_CHAR = 6.2  # 10 px system-ui, measured in Chromium


def _label_rows(marks: list[tuple[datetime, str, str]], axis: Axis) -> list[int]:
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


def stack_phase_figure(verdicts: list[Verdict], redact: Redact | None = None) -> go.Figure:
    """Phase per rank for every group and round: a grid of coloured cells, the frame in the hover."""
    rows = [(f"{v.group} · round {v.round + 1}", r.label, r.phase.phase,
             hover(f"{v.group} {r.label} round {v.round + 1}: {r.phase.phase} in "
                   f"{r.phase.frame.function if r.phase.frame else '?'} ({r.source}); verdict {v.verdict}", redact))
            for v in verdicts for r in v.ranks]
    phases = sorted({p for _, _, p, _ in rows})
    fig = go.Figure()
    for phase in phases:
        mine = [row for row in rows if row[2] == phase]
        fig.add_trace(go.Scatter(x=[m[1] for m in mine], y=[m[0] for m in mine], mode="markers+text", name=phase,
                                 text=[phase] * len(mine), textposition="middle center",
                                 customdata=[m[3] for m in mine],
                                 hovertemplate="%{customdata}<extra></extra>", textfont={"color": "white", "size": 9},
                                 marker={"symbol": "square", "size": 46, "color": PHASE_COLOURS.get(phase, "#7f7f7f")}))
    groups = sorted({r[0] for r in rows})
    fig.update_layout(height=120 + 60 * len(groups), template="plotly_white", title="py-spy: phase of each rank",
                      margin={"l": 10, "r": 10, "t": 50, "b": 30})
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(groups)))
    return fig


def icicle_figure(verdict: Verdict, redact: Redact | None = None) -> go.Figure:
    """The merged stacks of one group's ranks (outermost frame on top), coloured by phase."""
    tree = verdict.tree()
    colours = [PHASE_COLOURS.get(p, "#c7c7c7") if p else "#c7c7c7" for p in tree.get_column("phase")]
    fig = go.Figure(go.Icicle(
        ids=tree.get_column("id").to_list(), parents=tree.get_column("parent").to_list(),
        labels=[hover(label, redact, 60, 2) + "<br>ranks " + ", ".join(map(str, ranks))
                for label, ranks in tree.select("label", "ranks").iter_rows()],
        values=tree.get_column("value").to_list(), branchvalues="total", marker={"colors": colours},
        customdata=[", ".join(map(str, ranks)) for ranks in tree.get_column("ranks")],
        hovertemplate="%{label}<br>ranks %{customdata}<extra></extra>", tiling={"orientation": "v"}))
    fig.update_layout(height=520, margin={"l": 10, "r": 10, "t": 50, "b": 10},
                      title=f"{verdict.group}: merged stacks of {len(verdict.ranks)} ranks ({verdict.verdict})")
    return fig


def errors_figure(analysis: Analysis, redact: Redact | None = None, top: int = 12) -> go.Figure:
    """Notable lines per minute for the `top` templates by count (stacked bars), in the display zone."""
    counts = errors.per_minute(analysis.timeline)
    leaders = (counts.group_by("component", "template").agg(pl.col("count").sum())
               .sort("count", "component", "template", descending=[True, False, False], nulls_last=True).head(top))
    fig = go.Figure()
    for component, template, _ in leaders.iter_rows():
        rows = counts.filter((pl.col("component").eq_missing(component)) & (pl.col("template") == template))
        name = hover(f"{component or '?'}: {template}", redact, 70, 2)
        fig.add_trace(go.Bar(x=rows.select(wall("minute", analysis.display_zone)).to_series().to_list(),
                             y=rows.get_column("count").to_list(), name=name, meta=name,
                             hovertemplate="%{meta}<br>%{x}<br>%{y} lines<extra></extra>"))
    if leaders.is_empty():
        no_samples(fig, None, "no notable lines (warning or worse) in this bundle")
    fig.update_layout(barmode="stack", height=420, template="plotly_white", title="notable lines per minute",
                      xaxis_title=f"minute ({analysis.display_zone})", margin={"l": 10, "r": 10, "t": 50, "b": 40},
                      legend={"font": {"size": 9}})
    return fig

