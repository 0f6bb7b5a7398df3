"""The metric panels under the timeline: the profile's `[[metrics.panel]]` charts, those a notebook
added, and the families no panel draws that moved most. Gauges as they are, counters as rates,
bucketed so that all panels together stay within a point budget; a fleet's uninvolved instances
folded into a median."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import plotly.graph_objects as go
import polars as pl

from forensics.analyze import Analysis
from forensics.profiles import MetricPanel
from forensics.render.axis import BUCKETS, Axis, no_samples, wall_ms
from forensics.render.palette import DASHES, series_colour
from forensics.render.text import Redact, hover
from forensics.timeline.metrics import counter_rates, label, named, one_copy_per_engine


POINT_BUDGET = 60_000  # metric points over all panels; more series means coarser buckets
OTHER_PANELS = 3  # panels for families the profile does not draw, those that moved most
MAX_SERIES = 48  # per panel; beyond it, instances no finding names are folded into a median
LEGEND_SERIES = 16  # more metric series than this are told apart by their hover, not a legend


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


GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # DCGM's utilisation of each GPU, in percent
IDLE_PERCENT = 1.0  # under this in a GPU's last sample: idle


def idle_gpus(analysis: Analysis) -> pl.DataFrame:
    """The GPUs whose last DCGM utilisation sample is under IDLE_PERCENT: `instance`, `gpu` (its
    label, null where the scrape names none) and `value`, by instance and GPU number. An idle GPU
    beside a hang is evidence (nothing ran on it when it was scraped), whatever the scrape's time."""
    samples = analysis.timeline.samples.filter(named(GPU_UTIL))
    last = (samples.with_columns(instance_name(), label("gpu"))
            .sort(pl.coalesce("sample_ts", "ts"), "scrape", nulls_last=False)
            .group_by("instance", "gpu").agg(pl.col("value").drop_nulls().last()).collect())
    return (last.filter(pl.col("value") < IDLE_PERCENT)
            .sort("instance", pl.col("gpu").cast(pl.Int64, strict=False), "gpu", nulls_last=True))


def idle_gpus_said(analysis: Analysis) -> str:
    """The idle GPUs in words ("GPUs 0, 1, 2 on host:9400 at 0 % utilisation"), "" when none."""
    idle = idle_gpus(analysis)
    parts = []
    for (instance,), rows in idle.group_by("instance", maintain_order=True):
        gpus = [g for g in rows.get_column("gpu").to_list() if g is not None]
        values = sorted({f"{v:g}" for v in rows.get_column("value").to_list()})
        which = (f"GPU{'s' if len(gpus) > 1 else ''} {', '.join(gpus)}" if gpus else "its GPU")
        parts.append(f"{which} on {instance} at {' to '.join(values)} % utilisation")
    return "; ".join(parts)


def idle_gpus_sentence(analysis: Analysis, evidence: Callable[[str], str] = str) -> str:
    """The idle GPUs as the report says them beside its answer, in the page and in the text alike
    ("Idle: GPU 0 on host:9400 at 0 % utilisation (…, the last sample) beside the hang: …"), ""
    when none; `evidence` is applied to the part the scrape gave (the page redacts and escapes it)."""
    idle = idle_gpus_said(analysis)
    if not idle:
        return ""
    beside = " beside the hang: nothing ran on them when they were scraped" if analysis.incident_found else ""
    return f"Idle: {evidence(idle)} ({GPU_UTIL}, the last sample){beside}."


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
    if unit == "%":  # a percentage on its own scale: 0 % at the bottom of 100, not of an axis to 1
        fig.update_yaxes(range=[0, max(100.0, frame.get_column("value").max() * 1.05)], row=row, col=1)
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
