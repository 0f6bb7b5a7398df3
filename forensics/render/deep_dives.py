"""The deep-dive sections the logs, metrics and stacks notebooks show beside the report's own:
log volume, last progress, frequent templates, scrape instances, metric panels, stalls and restarts,
every rank's stack. A part of `ReportSession` (`forensics.render.sections`)."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from forensics.analyze import Analysis
from forensics.case.opened import instance_summary
from forensics.detect import errors, progress
from forensics.render import html
from forensics.render.axis import axis_for, wall
from forensics.render.cells import Figure, Html
from forensics.render.metric_panels import metric_panel, metric_panels
from forensics.render.text import Redact, hover


class DeepDives:
    """The deep dives of one analysis (`analysis`), redacted as the session says (`redact`)."""

    analysis: Analysis
    redact: Redact | None

    def log_volume(self) -> Figure:
        """Log lines per minute per host and component."""
        a = self.analysis
        counts = (a.timeline.activity.group_by(
            "minute", pl.concat_str([pl.col("host"), pl.coalesce("component", "identifier", pl.lit("other"))],
                                    separator=" · ", ignore_nulls=True).alias("where")).agg(pl.col("lines").sum().alias("len"))
                  .sort("minute", "where"))
        fig = go.Figure()
        for (where,), rows in counts.group_by("where", maintain_order=True):
            name = hover(where, self.redact, 60)
            fig.add_trace(go.Bar(x=rows.select(wall("minute", a.display_zone)).to_series().to_list(),
                                 y=rows.get_column("len").to_list(), name=name))
        fig.update_layout(barmode="stack", height=380, template="plotly_white", title="log lines per minute",
                          xaxis_title=f"minute ({a.display_zone})")
        return Figure(fig, "log-volume")

    def last_progress(self) -> Html:
        """Per component, host and rank tag: progress lines, first, last, pending at the last."""
        return Html(html.table(progress.last_progress(self.analysis.timeline), self.redact,
                               numeric=("lines", "running_req", "queue_req")))

    def templates(self, limit: int = 40) -> Html:
        """The most frequent warning-and-worse templates and line kinds, with per-minute peaks."""
        a = self.analysis
        start = a.key_times.started or a.timeline.first_ts
        table = (errors.templates(a.timeline, start).sort("count", descending=True).head(limit)
                 .select("component", "template", "count", "peak_per_minute", "first", "last", "new_in_window"))
        return Html(html.table(table, self.redact, numeric=("count", "peak_per_minute")))

    def instances(self) -> Html:
        """Per metrics instance and format: scrape times, series, samples, first and last."""
        table = instance_summary(self.analysis.timeline.samples)
        return Html(html.table(table, self.redact, numeric=("times", "series", "samples")))

    def metric_panels(self) -> Figure | Html:
        """The profile's metric panels alone, full width."""
        a = self.analysis
        axis = axis_for(a)
        panels = metric_panels(a, axis)
        if not panels:
            return Html("<p>No samples of the profile's panel metrics in this bundle.</p>")
        fig = make_subplots(rows=len(panels), cols=1, shared_xaxes=True,
                            subplot_titles=[panel.title for panel, _ in panels])
        for row, (panel, frame) in enumerate(panels, start=1):
            metric_panel(fig, frame, row, self.redact, legend=True, unit=panel.axis_title)
        fig.update_xaxes(type="date")
        fig.update_layout(height=260 * max(len(panels), 1), template="plotly_white")
        return Figure(fig, "metrics")

    def stalls_and_restarts(self) -> Html:
        """Windows where progress counters stood still, and restarts seen in the metrics."""
        from forensics.timeline.metrics import restarts, stalled
        a = self.analysis
        stalls = stalled(a.timeline.samples, a.timeline.profile)
        seen = restarts(a.timeline.samples, a.timeline.profile)
        return Html("<h3>stalled progress counters</h3>" + html.table(stalls, self.redact)
                    + "<h3>restarts</h3>" + html.table(seen, self.redact))

    def rank_stacks(self) -> Html:
        """Every rank's main-thread stack in every round, innermost frame first."""
        rows = [{"group": v.group, "round": v.round + 1, "rank": r.label, "pid": r.pid, "phase": r.phase.phase,
                 "stack": " ← ".join(f"{f.function} ({f.file}:{f.line})" for f in r.frames), "source": r.source}
                for v in self.analysis.verdicts for r in v.ranks]
        return Html(html.table(rows, self.redact) if rows else "<p>No py-spy stacks in this bundle.</p>")
