"""The report's smaller figures: the incident at a glance (a bar per component, green while it
made progress, red while frozen), the py-spy phase grid, a group's merged stacks as an icicle, and
notable lines per minute. The timeline itself is `forensics.render.swimlanes`.
"""

from __future__ import annotations

from datetime import datetime

import plotly.graph_objects as go
import polars as pl

from forensics.analyze import Analysis
from forensics.detect import errors, rank_list, span
from forensics.detect.stack_verdict import Verdict
from forensics.render.axis import label_rows, axis_for, no_samples, wall, wall_time, x_range
from forensics.render.palette import KEY_TIME_COLOURS, OVERVIEW_COLOURS, PHASE_COLOURS
from forensics.render.text import Redact, hover


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
    label_row = label_rows(marks, axis)
    for (at, text, colour), row in zip(marks, label_row, strict=True):
        fig.add_vline(x=wall_time(at, axis.zone), line={"dash": "dash", "width": 1, "color": colour})
        # each key time labelled above the strip, rows stacked so that no label covers another
        fig.add_annotation(x=wall_time(at, axis.zone), y=1.0, yref="paper", yanchor="bottom", yshift=2 + 15 * row,
                           showarrow=False, text=text, font={"size": 10, "color": colour}, xanchor="left",
                           bgcolor="rgba(255,255,255,0.85)", name="key-time")
    fig.update_xaxes(type="date", range=x_range(axis))
    fig.update_yaxes(autorange="reversed")
    rows = max(spans.height, 1)
    label_px = 15 * (max(label_row, default=-1) + 1)
    plot_px = 40 + 34 * rows
    # the legend under the time axis and its date line (about 45 px down), not over the labels
    fig.update_layout(height=plot_px + 85 + 10 + label_px, barmode="overlay", template="plotly_white", showlegend=True,
                      legend={"orientation": "h", "yanchor": "top", "y": -50 / plot_px, "x": 0},
                      margin={"l": 10, "r": 10, "t": 10 + label_px, "b": 85})
    return fig


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


RANK_PREFIX = r"\[rank(\d+)\]"  # torch.distributed's prefix of a rank's line


def errors_figure(analysis: Analysis, redact: Redact | None = None, top: int = 12) -> go.Figure:
    """Notable lines per minute for the `top` templates by count (stacked bars), in the display zone."""
    # the same line written by every rank ("[rank3]:[E710 …] …") is one series with its ranks listed
    counts = (errors.per_minute(analysis.timeline)
              .with_columns(pl.col("template").str.extract(RANK_PREFIX, 1).cast(pl.Int64, strict=False).alias("rank"),
                            pl.col("template").str.replace_all(RANK_PREFIX, "[rank<n>]"))
              .group_by("minute", "component", "template")
              .agg(pl.col("count").sum(), pl.col("rank").drop_nulls().unique()))
    leaders = (counts.group_by("component", "template")
               .agg(pl.col("count").sum(), pl.col("rank").list.explode(keep_nulls=False, empty_as_null=False).unique())
               .sort("count", "component", "template", descending=[True, False, False], nulls_last=True).head(top))
    fig = go.Figure()
    for component, template, _, ranks in leaders.iter_rows():
        rows = (counts.filter(pl.col("component").eq_missing(component) & (pl.col("template") == template))
                .sort("minute"))
        said = f" · rank{'s' if len(ranks) > 1 else ''} {rank_list(ranks)}" if ranks else ""
        name = hover(f"{component or '?'}{said}: {template}", redact, 70, 2)
        fig.add_trace(go.Bar(x=rows.select(wall("minute", analysis.display_zone)).to_series().to_list(),
                             y=rows.get_column("count").to_list(), name=name, meta=name,
                             hovertemplate="%{meta}<br>%{x}<br>%{y} lines<extra></extra>"))
    if leaders.is_empty():
        no_samples(fig, None, "no notable lines (warning or worse) in this bundle")
    fig.update_layout(barmode="stack", height=420, template="plotly_white", title="notable lines per minute",
                      xaxis_title=f"minute ({analysis.display_zone})", margin={"l": 10, "r": 10, "t": 50, "b": 40},
                      legend={"font": {"size": 9}})
    return fig
