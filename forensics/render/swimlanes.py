"""The interactive timeline: one swimlane per host / component / rank, with the metric panels
below on the same time axis.

Each lane has a heat strip of progress lines per time bucket (a freeze is where the strip goes
blank), warnings and line kinds as markers sized by their count per bucket, every lifecycle
message, the py-spy phase of every rank at its capture time, health checks per minute, one lane per
symptom track with every finding (a bar for a window), failure-mode symbols, and a dashed line per
annotation and key time across every panel. Dense series are bucketed so that a figure's size
depends on the number of lanes and series, not on the number of records; lifecycle messages,
findings, error templates and annotations are never dropped. Every string from the evidence goes
through `forensics.render.text.hover` (redacted when asked, always escaped).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from forensics.analyze import Analysis, is_anomaly
from forensics.detect import errors, failures, rank_list
from forensics.detect.lifecycle import FAILED, RESTART_SCHEDULED, STARTED, STARTING, STOPPED, STOPPING
from forensics.detect.stack_verdict import HANG_VERDICTS, Verdict
from forensics.detect.stacks import latest
from forensics.profiles import MetricPanel, layers
from forensics.render.axis import (BUCKETS, LABEL_CHARS, MAX_BUCKETS, NARROWEST_PLOT_PX, X_MARGIN, Axis, label_rows,
                                   duration_words, axis_for, no_samples, no_time_axis, wall, wall_ms, wall_time,
                                   x_range)
from forensics.render.lanes import Mark, lane_order, health_lines, lane_expr, marked_rows, natural_key, stack_lane
from forensics.render.metric_panels import GPU_UTIL, idle_gpus_said, metric_panel, metric_panels
from forensics.render.palette import (ERROR_KINDS_COLOUR, FAULT_COLOUR, FAULT_SYMBOLS, KEY_TIME_COLOURS, PHASE_COLOURS,
                                      track_colour)
from forensics.render.text import Redact, hover, shorten


LIFECYCLE_IDS = {STARTING: "starting", STARTED: "started", STOPPING: "stopping", STOPPED: "stopped",
                 FAILED: "failed", RESTART_SCHEDULED: "restart scheduled"}
MAX_CELLS = 300_000  # progress-strip cells (lanes × buckets); more lanes means coarser buckets
HOVER_CELLS = 40_000  # swimlane cells that carry their lane's name in the hover (past that, the page grows)
LANE_CHARS = 44  # a lane's name on the axis; longer ones lose their middle
LANE_PX = 22  # a swimlane's height
MARKER_HALF_PX = 12.5  # half the biggest swimlane marker (the error crosses)


def timeline_figure(analysis: Analysis, redact: Redact | None = None, max_buckets: int = MAX_BUCKETS,
                    extra_panels: Sequence[MetricPanel] = (), marks: Sequence[Mark] = ()) -> go.Figure:
    """The interactive timeline: swimlanes on top, the profile's metric panels below, one time axis;
    `extra_panels` and `marks` are what a notebook cell added (`ReportSession.add_panel` / `mark`)."""
    axis = axis_for(analysis, max_buckets)
    panels = metric_panels(analysis, axis, extra_panels)
    events = analysis.timeline.events.with_columns(lane_expr())
    marked = [(mark, marked_rows(analysis, events, mark.where)) for mark in marks]
    checks = health_lines(events)
    progress_counts = analysis.timeline.progress_counts.with_columns(lane_expr())
    logging = set(progress_counts.get_column("lane").unique().to_list())
    lanes, unseen = _lanes(analysis, events, logging, checks.get_column("lane").unique().to_list())
    lanes = [f"mark · {mark.label}" for mark in marks] + lanes
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
    why = no_time_axis(analysis)  # nothing carries a time of its own: no time axis, no bucket to name
    title = "swimlanes" + ("" if why else ": progress lines per " + duration_words(axis.bucket_s))
    fig = make_subplots(rows=1 + len(panels), cols=1, shared_xaxes=True,
                        vertical_spacing=gap_px / (sum(heights) + gap_px * len(panels)),
                        row_heights=[h / sum(heights) for h in heights],
                        subplot_titles=[title] + [panel.title for panel, _ in panels])
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
    idle = idle_gpus_said(analysis) if any(GPU_UTIL in panel.gauges for panel, _ in panels) else ""
    for row, (panel, frame) in enumerate(panels, start=2):
        metric_panel(fig, frame, row, redact, unit=panel.axis_title)
        if idle and GPU_UTIL in panel.gauges:  # an idle GPU is said where its panel is, not left to a dot at 0
            fig.layout.annotations[row - 1].text = f"{panel.title} — idle: {hover(idle, redact, 70, 2)}"
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
                      legend={"orientation": "h", "yanchor": "bottom", "y": 1.01, "x": 0, "xanchor": "left"})
    _legend_of_what_is_drawn(fig, title, hover(unseen_ranks_sentence(unseen), redact, 160, 3))
    if why is not None:
        _without_time(fig, why, len(panels))
    return fig


def _lanes(analysis: Analysis, events: pl.DataFrame, logging: set[str], health: list[str]
           ) -> tuple[list[str], list[str]]:
    """The swimlanes in the order they are drawn — the tracks (non-fatal device errors after the
    others), then the lanes of the host at fault, then the rest by name with numbers as numbers
    (`lane_order`) — and the lanes of ranks left out for having nothing to draw in them (no
    progress, error or lifecycle line, no timed stack): dozens of blank lanes hid the few that
    show the incident, so they are counted instead (`unseen_ranks_sentence`)."""
    stack_lanes = [stack_lane(r.host, r.group, r.label) for v in analysis.verdicts for r in v.ranks]
    tracks = [f"track · {t.name}" for t in sorted(analysis.tracks, key=lambda t: _non_fatal_track(t.name))]
    # every line's lane, the routine lines a lean timeline only counts included
    logged = analysis.timeline.activity.select(lane_expr()).get_column("lane").unique().to_list()
    drawn = (logging | set(health) | set(_notable(events).get_column("lane"))
             | set(_lifecycle(events).get_column("lane"))
             | {stack_lane(r.host, r.group, r.label) for v in analysis.verdicts for r in v.ranks if r.ts})
    unseen = sorted({lane for lane in logged + stack_lanes if lane not in drawn and _is_rank_lane(lane, stack_lanes)},
                    key=natural_key)
    kept = [lane for lane in logged + stack_lanes + health if lane not in unseen]
    return tracks + lane_order(kept, fault_hosts(analysis)), unseen


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
        colorbar={"title": {"text": f"batch lines<br>per {duration_words(int(every[:-1]))}", "side": "top"},
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
        text = f"{f.component or shorten(lane, LANE_CHARS)} last batch {at:%H:%M:%S}"
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
    under it there or the label would run out of the plot on that side, then up-right, down-left,
    down-right, then the same with longer lines; the place with the fewest markers under it
    otherwise. Pixels are reckoned on the narrowest plot a page gives, so wider pages only leave
    more room."""
    margin_s = (axis.end - axis.start).total_seconds() * X_MARGIN
    span_s = max((axis.end - axis.start).total_seconds() + 2 * margin_s, 1.0)
    px_per_s = NARROWEST_PLOT_PX / span_s
    width = chars * 6.5 + 8  # an 11 px font's characters and the box's padding
    at_ms = _wall_ms(at) or 0.0
    left_px = ((at - wall_time(axis.start, axis.zone)).total_seconds() + margin_s) * px_per_s  # to the plot's edge
    right_px = NARROWEST_PLOT_PX - left_px
    counts = {}
    # a rise of 20 px keeps the box between its own lane's markers and the next lane's centre
    for ax, ay in ((-14, -20), (14, -20), (-14, 20), (14, 20), (-44, -20), (44, -20), (-44, 20), (44, 20),
                   (-80, -20), (80, -20), (-80, 20), (80, 20)):
        left, right = (ax - width, ax) if ax < 0 else (ax, ax + width)
        top, bottom = ay - 7.5, ay + 7.5  # the label's box, relative to the marker (down is positive)
        outside = left < -left_px or right > right_px  # past the plot's edge: over the lane names, or cut off
        counts[(ax, ay)] = outside * 1000 + sum(
            1 for x, y in drawn
            if left - MARKER_HALF_PX < (x - at_ms) / 1000 * px_per_s < right + MARKER_HALF_PX
            and top - MARKER_HALF_PX < (lane - y) * LANE_PX < bottom + MARKER_HALF_PX
            and not (x == at_ms and y == lane))
    return min(counts, key=lambda side: (counts[side] > 0, counts[side]))


HEALTH = {"answered": ("#5aae61", "square"), "failed": (ERROR_KINDS_COLOUR, "square-x")}


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


def _notable(events: pl.DataFrame) -> pl.DataFrame:
    """Lines drawn as error markers: warnings and worse, and lines of a kind worth a finding, but
    not non-fatal device errors (drawn apart, as no fault: `_non_fatal_markers`)."""
    return events.filter(((pl.col("priority") <= errors.WARNING) | pl.col("event").is_not_null())
                         & ~_non_fatal_line())


def _non_fatal_line() -> pl.Expr:
    """A line of a kind whose track is a non-fatal one (a corrected Xid, a corrected PCIe error)."""
    return pl.col("event").is_in(list(_non_fatal_kinds())).fill_null(False)


def _non_fatal_kinds() -> set[str]:
    return {e.kind for layer in layers() for e in layer.events if _non_fatal_track(e.track)}


def _error_markers(fig: go.Figure, events: pl.DataFrame, axis: Axis, lane_y: dict[str, int],
                   redact: Redact | None) -> None:
    notable = (_notable(events)
               .with_columns(errors.template(pl.col("message")).alias("template"))
               .group_by(pl.col("ts").dt.truncate(axis.every).alias("bucket"), "lane", "template")
               .agg(pl.len().alias("n"), pl.col("message").first(), pl.col("event").first(), pl.col("ts").min())
               .sort("ts", "lane", "template"))  # ties broken: the same figure every time
    if notable.is_empty():
        return
    x = notable.select(wall_ms("ts", axis.zone)).to_series().to_numpy()
    text = [hover(f"{n} × {event or 'warning or worse'} in this {duration_words(axis.bucket_s)}: {message}", redact)
            for n, event, message in notable.select("n", "event", "message").iter_rows()]
    sizes = notable.select((pl.col("n").log(2) * 3 + 7).clip(7, 22)).to_series().to_list()
    fig.add_trace(go.Scatter(x=x, y=[lane_y[v] for v in notable.get_column("lane")], mode="markers",
                             name="errors and notable lines", text=text, hovertemplate="%{text}<extra></extra>",
                             marker={"symbol": "x", "color": ERROR_KINDS_COLOUR, "size": sizes, "opacity": 0.8}),
                  row=1, col=1)
    _non_fatal_markers(fig, events, axis, lane_y, redact)


NON_FATAL_MARKER = {"symbol": "circle-open", "size": 12, "color": "#737373", "line": {"width": 2}}


def _non_fatal_markers(fig: go.Figure, events: pl.DataFrame, axis: Axis, lane_y: dict[str, int],
                       redact: Redact | None) -> None:
    """Non-fatal device errors in the lane of the log that wrote them, with a marker of their own:
    reported, not drawn as errors (the device went on)."""
    rows = events.filter(_non_fatal_line()).sort("ts")
    if rows.is_empty():
        return
    fig.add_trace(go.Scatter(
        x=rows.select(wall_ms("ts", axis.zone)).to_series().to_numpy(), y=[lane_y[v] for v in rows.get_column("lane")],
        mode="markers", name="non-fatal device error (no fault)", hovertemplate="%{text}<extra></extra>",
        legendgroup=NON_FATAL, showlegend=False,  # one legend entry with its track's findings
        text=[hover(f"non-fatal ({event}), no fault: {message}", redact)
              for event, message in rows.select("event", "message").iter_rows()],
        marker=NON_FATAL_MARKER), row=1, col=1)


def _lifecycle(events: pl.DataFrame) -> pl.DataFrame:
    """Lifecycle lines: systemd's start, stop and failure messages, and systemctl commands."""
    return events.filter(pl.col("message_id").is_in(list(LIFECYCLE_IDS))
                         | pl.col("message").str.contains(r"COMMAND=\S*systemctl\s")).sort("ts")


def _lifecycle_markers(fig: go.Figure, events: pl.DataFrame, axis: Axis, lane_y: dict[str, int],
                       redact: Redact | None) -> None:
    rows = _lifecycle(events)
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
        if not ranks:  # dumps with no time of their own are not placed on a time axis
            continue
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


def _failure_markers(fig: go.Figure, analysis: Analysis, axis: Axis, lane_y: dict[str, int],
                     redact: Redact | None) -> None:
    """The failure-mode findings (collective timeouts, device faults, OOM, crash loops, start-ups
    that failed, stalled or died, stuck stacks) as their own markers over their track's lane: a
    symbol per failure mode, a legend entry per kind drawn, named by the kind itself (a rank
    aborted by its watchdog is not called a collective timeout where none was caught)."""
    faults = {e.kind: e.fault for e in analysis.timeline.profile.logs.events if e.fault}
    modes = [f for f in failures.headline(analysis.reported()) if f.at and f"track · {f.track}" in lane_y]
    for kind in dict.fromkeys(f.kind for f in modes):
        mine = [f for f in modes if f.kind == kind]
        fault = faults.get(kind, kind.replace("_", " "))
        fig.add_trace(go.Scatter(
            x=[wall_time(f.at, axis.zone) for f in mine if f.at], y=[lane_y[f"track · {f.track}"] for f in mine],
            mode="markers", name=f"failure: {kind.replace('_', ' ')}",
            text=[hover(f"[{f.kind}] {f.text}", redact) for f in mine], hovertemplate="%{text}<extra></extra>",
            marker={"symbol": FAULT_SYMBOLS.get(fault, "diamond-wide"), "size": 16, "color": FAULT_COLOUR,
                    "line": {"width": 1.5, "color": "black"}}), row=1, col=1)


def _finding_lanes(fig: go.Figure, analysis: Analysis, axis: Axis, lane_y: dict[str, int],
                   redact: Redact | None) -> None:
    for track in analysis.tracks:
        lane = lane_y[f"track · {track.name}"]
        colour = track_colour(analysis, track.name)
        points = [f for f in track.findings if f.at]
        if not points:  # a track of findings the evidence gives no time: nothing to draw, no legend entry
            continue
        # non-fatal device errors: reported with a marker of their own, never in a fault's colours
        marker = (NON_FATAL_MARKER if _non_fatal_track(track.name)
                  else {"symbol": "circle", "size": 11, "color": colour})
        fig.add_trace(go.Scatter(
            x=[wall_time(f.at, axis.zone) for f in points if f.at], y=[lane] * len(points), mode="markers",
            name=f"{track.name} (reported, no fault)" if _non_fatal_track(track.name) else f"findings: {track.name}",
            legendgroup=NON_FATAL if _non_fatal_track(track.name) else None,
            text=[hover(f"[{f.kind}] {f.text}", redact) for f in points],
            hovertemplate="%{text}<extra></extra>", marker=marker), row=1, col=1)
        windows = [f for f in points if f.until and f.at and f.until > f.at]
        if windows:
            xs: list[datetime | None] = []
            for f in windows:
                xs += [wall_time(f.at, axis.zone), wall_time(f.until, axis.zone), None]  # type: ignore[arg-type]
            fig.add_trace(go.Scatter(x=xs, y=[lane, lane, None] * len(windows), mode="lines", showlegend=False,
                                     hoverinfo="skip", line={"width": 6, "color": colour}, opacity=0.35),
                          row=1, col=1)


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
    for (at, text, colour), row in zip(marks, label_rows(marks, axis), strict=True):
        label = text if len(text) <= LABEL_CHARS else text[:LABEL_CHARS - 1] + "…"
        fig.add_annotation(x=wall_time(at, axis.zone), y=1.0, yref="paper", yshift=-15 * row, showarrow=False,
                           text=hover(label, redact, 60, 1), font={"size": 10, "color": colour},
                           xanchor="left", bgcolor="rgba(255,255,255,0.85)")


NON_FATAL = "non-fatal"  # a track of findings reported with no fault ("non-fatal device errors")
RANK_TAG = re.compile(r" · ((?:DP|PP)\d+ )*(?P<kind>DP|PP|TP)(?P<n>\d+)$")  # a lane's rank, as `rank_label` writes it
UNSEEN_GROUPS = 4  # lane prefixes named in the sentence about ranks with no lane; the rest are counted


def _non_fatal_track(name: str) -> bool:
    return name.startswith(NON_FATAL)


def _is_rank_lane(lane: str, stack_lanes: Sequence[str]) -> bool:
    """A lane of one rank: a py-spy rank's, or a log line's that names its rank."""
    return lane in stack_lanes or RANK_TAG.search(lane) is not None


def fault_hosts(analysis: Analysis) -> list[str]:
    """Hosts in the order their lanes are drawn: the host of a freeze or of the headline failure
    first (the host at fault), then those of hung stacks, then the others findings or stacks name."""
    frozen = [f.host for f in analysis.findings if f.kind == "frozen" and f.host]
    headline = [f.host for f in failures.headline(analysis.reported()) if f.host]
    hung = [r.host for v in latest(analysis.verdicts) if v.verdict in HANG_VERDICTS for r in v.ranks if r.host]
    named = ([f.host for f in analysis.findings if f.host and is_anomaly(f)]
             + [r.host for v in analysis.verdicts for r in v.ranks if r.host])
    return list(dict.fromkeys(frozen + headline + hung + named))


def unseen_ranks_sentence(unseen: Sequence[str]) -> str:
    """The ranks left without a lane, in one sentence: how many, and which, by host and engine."""
    if not unseen:
        return ""
    groups: dict[str, list[int]] = {}
    others: list[str] = []
    for lane in unseen:
        tag = RANK_TAG.search(lane)
        if tag is None:
            others.append(lane)
            continue
        groups.setdefault(f"{lane[:tag.start()]} {tag['kind']}", []).append(int(tag["n"]))
    named = [f"{where} {rank_list(ranks)}" for where, ranks in groups.items()] + others
    rest = len(named) - UNSEEN_GROUPS
    listed = "; ".join(named[:UNSEEN_GROUPS]) + (f"; and {rest} more" if rest > 0 else "")
    n = len(unseen)
    return (f"{n} rank{'s' if n > 1 else ''} with nothing to draw here (no progress, error or lifecycle line, no "
            f"timed stack) {'have' if n > 1 else 'has'} no lane: {listed}")


def _legend_of_what_is_drawn(fig: go.Figure, title: str, note: str) -> None:
    """A legend entry only for what is drawn, and the swimlanes' title (with `note`) as the
    legend's own title: a title apart from the legend was overlapped by its rows at 1400 px."""
    for trace in fig.data:
        if trace.type == "scatter" and not _draws(trace):
            trace.showlegend = False
    entries = [t for t in fig.data
               if t.type == "scatter" and t.showlegend is not False and t.legend in (None, "legend")]
    (heading,) = [a for a in fig.layout.annotations if a.text == title]
    words = title + (f'<br><span style="font-size:11px;color:#555">{note}</span>' if note else "")
    if entries:
        heading.text = ""
        fig.update_layout(legend_title={"text": words, "side": "top", "font": {"size": 13}})
    else:
        heading.text = words


def _draws(trace: Any) -> bool:
    """Whether a scatter trace draws a point: one with a time (a line the evidence gives no time
    is not placed on a time axis)."""
    xs = trace.x if trace.x is not None else ()
    return any(x is not None and not (isinstance(x, (float, np.floating)) and np.isnan(x)) for x in xs)


def _without_time(fig: go.Figure, why: str, panels: int) -> None:
    """No time axis where nothing carries a time of its own: no dates on the axis, none in a
    hover, and the axis says why (its place left to right means no time)."""
    fig.update_xaxes(showticklabels=False, showspikes=False, showgrid=False, title_text="")
    fig.update_xaxes(title_text="no time axis: nothing in this bundle carries a time of its own "
                                "(left to right means nothing)", row=1 + panels, col=1)
    for trace in fig.data:
        if trace.hovertemplate:
            trace.hovertemplate = re.sub(r"<br>%\{x[^}]*\}|%\{x[^}]*\}: ", "", trace.hovertemplate)
    fig.update_layout(meta={"no_time_axis": why})
