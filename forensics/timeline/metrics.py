"""Series derived from the `samples` frame: counter rates with resets, restarts, histogram
quantiles per interval, gauges as steps, and the "stalled" signal.

Everything is per instance and series, between consecutive scrapes (or API points) in time order:

- `counter_rates`: increase and per-second rate between scrapes. A counter that goes down has been
  reset (the process restarted): the increase is then the new value, as Prometheus's `rate()`
  counts it.
- `restarts`: a change of `process_start_time_seconds`, or any counter reset, between two scrapes
  is a restart inside that bracket (and exactly at the new start time when the gauge gives it).
- `histogram_quantiles`: the q-quantile of what was observed in each interval, from bucket
  increases, interpolated linearly inside the bucket as `histogram_quantile()` does.
- `gauge_steps`: a gauge holds its value from one scrape until the next.
- `stalled`: intervals where the profile's progress counters did not move while its pending
  gauges were above zero, merged into windows that last long enough to matter: the engine looks
  alive (it answers `/metrics`) but does no work.
"""

from __future__ import annotations

import itertools

import polars as pl

from forensics.profiles import Profile, load_profile
from forensics.sources.prometheus.promtext import name_key

SERIES = ["instance", "series"]


# A name's key is matched by its spellings up to this many `_` in it (2^n spellings); past them
# by rewriting every sample's name.
MOST_SPELLED = 10


def spellings(key: str) -> list[str]:
    """Every name whose `promtext.name_key` is `key`: each `_` in it written `_` or `:`."""
    parts = key.split("_")
    return ["".join(part + sep for part, sep in zip(parts, (*seps, "")))
            for seps in itertools.product("_:", repeat=len(parts) - 1)]


def named(names: tuple[str, ...] | list[str] | str) -> pl.Expr:
    """Samples whose name is one of `names`, compared with `:` read as `_` (see `promtext.name_key`).
    Asked as a set of spellings, so that a category column is looked up by its codes rather than
    made into text on every sample (at a 128-host fleet's 6.2 M samples: 0.04 s against 0.2)."""
    wanted = [name_key(n) for n in ([names] if isinstance(names, str) else names)]
    if all(key.count("_") <= MOST_SPELLED for key in wanted):
        return pl.col("name").is_in([spelled for key in wanted for spelled in spellings(key)])
    return pl.col("name").cast(pl.String).str.replace_all(":", "_", literal=True).is_in(wanted)


_PLAIN_LABELS = pl.List(pl.Struct({"name": pl.String, "value": pl.String}))


def label(name: str) -> pl.Expr:
    """One label of the `labels` list as a column (null where the sample has no such label), e.g.
    `case.samples.with_columns(label("tp_rank"))`."""
    return (pl.col("labels").list.eval(pl.element().filter(pl.element().struct.field("name") == name)
                                       .struct.field("value")).list.first().cast(pl.String).alias(name))


REPLICA_LABEL = "tp_rank"  # every TP rank of one engine exports the engine's own counters


def one_copy_per_engine(samples: pl.DataFrame | pl.LazyFrame) -> pl.LazyFrame:
    """Samples with the copies TP ranks export of one engine's series left out: of the series of an
    instance and name that differ only in `tp_rank`, the lowest rank's (rank 0's) is kept. Engines
    (instances, DP ranks) still add up."""
    frame = samples.lazy() if isinstance(samples, pl.DataFrame) else samples
    ranked = frame.with_columns(label(REPLICA_LABEL).cast(pl.Int64, strict=False).alias("_tp"))
    lowest = pl.col("_tp").min().over(pl.col("instance").cast(pl.String), pl.col("name").cast(pl.String))
    return ranked.filter(pl.col("_tp").is_null() | (pl.col("_tp") == lowest)).drop("_tp")


#: The columns `_ordered` keeps by default: what the derived series read (the other columns —
#: help, unit, sources — stay behind).
ORDERED_COLUMNS = ("instance", "family", "name", "type", "series", "labels", "value")


def _ordered(samples: pl.DataFrame | pl.LazyFrame, where: pl.Expr | None = None,
             columns: tuple[str, ...] = ORDERED_COLUMNS) -> pl.LazyFrame:
    """Samples (those `where` picks, first: a fleet's samples are millions) in time order (`at`),
    with `columns` only; categories are made plain strings for string work after any grouping a
    caller does on them (`as_text`)."""
    frame = samples.lazy() if isinstance(samples, pl.DataFrame) else samples
    if where is not None:
        frame = frame.filter(where)
    frame = frame.select(*columns, pl.coalesce("sample_ts", "ts").alias("at"))
    if "labels" in columns:
        frame = frame.with_columns(pl.col("labels").cast(_PLAIN_LABELS))
    return frame.sort("at")


def as_text(frame: pl.LazyFrame) -> pl.LazyFrame:
    """`frame` with its category columns as plain strings."""
    return frame.with_columns(pl.col(pl.Categorical).cast(pl.String))


def counter_rates(samples: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """Per counter series and interval: start, end, increase, rate (per second) and reset flag.
    Counters are the samples typed counter, and histogram/summary `_count`, `_sum`, `_bucket`."""
    return _counter_intervals(samples).collect()


def _counter_intervals(samples: pl.DataFrame | pl.LazyFrame,
                       carried: tuple[str, ...] = ("family", "name", "labels")) -> pl.LazyFrame:
    """`counter_rates` as a query (to narrow before it is run), with only the `carried` columns of
    each sample beside its instance, series and numbers: at 6 M samples (a 128-host fleet), finding
    the counter resets took 2.0 s with every column, 0.7 s with none."""
    name = pl.col("name").cast(pl.String)
    counters = pl.col("type").eq("counter") & ~name.str.ends_with("_created") | (
        pl.col("type").is_in(["histogram", "summary"]) & name.str.contains(r"_(count|sum|bucket)$"))
    previous = pl.col("value").shift(1).over(SERIES)
    start = pl.col("at").shift(1).over(SERIES)
    kept = [c for c in ("instance", "family", "name", "series", "labels") if c in SERIES or c in carried]
    return as_text(_ordered(samples, counters, (*kept, "value"))
                   .with_columns(previous.alias("previous"), start.alias("start"))
                   .filter(pl.col("start").is_not_null())
                   .with_columns((pl.col("value") < pl.col("previous")).alias("reset"))
                   .with_columns(pl.when(pl.col("reset")).then(pl.col("value"))
                                 .otherwise(pl.col("value") - pl.col("previous")).alias("increase"),
                                 ((pl.col("at") - pl.col("start")).dt.total_microseconds() / 1e6).alias("seconds"))
                   .with_columns((pl.col("increase") / pl.col("seconds")).alias("rate"))
                   .select(*kept, "start", pl.col("at").alias("end"), "previous", "value", "increase", "seconds",
                           "rate", "reset"))


def _epoch_text(seconds: pl.Expr) -> pl.Expr:
    """Seconds since the epoch as a UTC time in words (a start-time gauge's value)."""
    return (pl.from_epoch((seconds * 1e6).cast(pl.Int64), time_unit="us").dt.strftime("%Y-%m-%d %H:%M:%S UTC"))


def restarts(samples: pl.DataFrame | pl.LazyFrame, profile: Profile | None = None) -> pl.DataFrame:
    """Per instance: each restart seen between two scrapes, with its time bracket and evidence."""
    profile = profile or load_profile()
    start_gauge = profile.metrics.start_time
    by_gauge = (as_text(_ordered(samples, named(start_gauge), ("instance", "series", "value")))
                .with_columns(pl.col("value").shift(1).over(SERIES).alias("previous"),
                              pl.col("at").shift(1).over(SERIES).alias("after"))
                .filter(pl.col("previous").is_not_null() & (pl.col("value") != pl.col("previous")))
                .select("instance", "after", pl.col("at").alias("before"),
                        pl.from_epoch((pl.col("value") * 1e6).cast(pl.Int64), time_unit="us")
                        .dt.replace_time_zone("UTC").alias("started_at"),
                        pl.format("{} changed from {} to {} (process start times)", pl.lit(start_gauge),
                                  _epoch_text(pl.col("previous")), _epoch_text(pl.col("value")))
                        .alias("evidence")))
    resets = (_counter_intervals(samples, carried=()).select("instance", "series", "start", "end", "reset")
              .filter(pl.col("reset")).collect())
    by_reset = (resets.group_by("instance", "start", "end")
                .agg(pl.len().alias("n"), pl.col("series").first().alias("example"))
                .select("instance", pl.col("start").alias("after"), pl.col("end").alias("before"),
                        pl.lit(None, by_gauge.collect_schema()["started_at"]).alias("started_at"),
                        pl.format("{} counter series went down (e.g. {})", "n", "example").alias("evidence")))
    both = pl.concat([by_gauge.collect(), by_reset])
    return (both.group_by("instance", "after", "before")
            .agg(pl.col("started_at").drop_nulls().first(), pl.col("evidence").sort().str.join("; "))
            .sort("before", "instance"))


def histogram_quantiles(samples: pl.DataFrame | pl.LazyFrame, q: float) -> pl.DataFrame:
    """Per histogram series (labels without `le`) and interval: the q-quantile of the
    observations made in that interval; null when nothing was observed."""
    if not 0 <= q <= 1:
        raise ValueError(f"quantile {q} is outside [0, 1]")
    rates = counter_rates(samples).filter(pl.col("name").str.ends_with("_bucket"))
    le = pl.col("labels").list.eval(pl.element().filter(pl.element().struct.field("name") == "le")
                                    .struct.field("value")).list.first()
    others = pl.col("labels").list.eval(pl.element().filter(pl.element().struct.field("name") != "le"))
    buckets = (rates.with_columns(le.cast(pl.Float64, strict=False).alias("le"), others.alias("group_labels"))
               .filter(pl.col("le").is_not_null())
               .sort("instance", "family", "start", "end", "le"))
    key = ["instance", "family", "group_labels", "start", "end"]
    # Prometheus's histogram_quantile, per interval, as expressions: the rank is q × the +Inf
    # bucket's count; the answer lies in the first bucket whose cumulative count reaches it,
    # interpolated linearly from the bucket below (0 below the first; the +Inf bucket gives its
    # lower bound).
    per_bucket = buckets.with_columns(
        pl.col("increase").last().over(key).alias("observations"),
        pl.col("le").last().over(key).alias("top"),
        pl.col("le").shift(1).over(key).fill_null(0.0).alias("lower"),
        pl.col("increase").shift(1).over(key).fill_null(0.0).alias("count_below"),
        pl.col("le").shift(1).over(key).is_null().alias("first_bucket"),
    ).with_columns((pl.col("observations") * q).alias("rank"))
    answerable = (pl.col("top") == float("inf")) & (pl.col("observations") > 0)
    reached = per_bucket.filter(answerable & (pl.col("increase") >= pl.col("rank"))).group_by(
        key, maintain_order=True).first()
    in_bucket = pl.col("increase") - pl.col("count_below")
    value = (pl.when(pl.col("le") == float("inf"))
             .then(pl.when(pl.col("first_bucket")).then(None).otherwise(pl.col("lower")))
             .otherwise(pl.col("lower") + (pl.col("le") - pl.col("lower"))
                        * pl.when(in_bucket > 0).then((pl.col("rank") - pl.col("count_below")) / in_bucket)
                        .otherwise(0.0)))
    answers = reached.select(*key, value.alias("value"))
    intervals = per_bucket.group_by(key, maintain_order=True).agg(pl.col("observations").first())
    return (intervals.join(answers, on=key, how="left", nulls_equal=True, maintain_order="left")
            .select(*key, pl.lit(q).alias("q"), "value", pl.col("observations").fill_null(0.0)))


def gauge_steps(samples: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """Each gauge value with the time it holds until (the next scrape; null for the last)."""
    return (as_text(_ordered(samples, pl.col("type") == "gauge"))
            .with_columns(pl.col("at").shift(-1).over(SERIES).alias("until"))
            .select("instance", "family", "name", "series", "labels", pl.col("at").alias("from"), "until", "value")
            .collect())


def stalled(samples: pl.DataFrame | pl.LazyFrame, profile: Profile | None = None,
            min_seconds: float | None = None) -> pl.DataFrame:
    """Windows per instance where no progress counter moved while a pending gauge was above zero,
    lasting at least `min_seconds` (default: the profile's `stall_min_seconds`) — shorter flat
    runs are what sampling faster than the engine's counters update looks like.

    Columns: instance, start, end (scrape times bracketing the window), intervals, the pending
    peak, and the evidence in words."""
    profile = profile or load_profile()
    rules = profile.metrics
    min_seconds = rules.stall_min_seconds if min_seconds is None else min_seconds
    lazy = samples.lazy() if isinstance(samples, pl.DataFrame) else samples
    rates = _counter_intervals(lazy.filter(named(rules.progress)), carried=()).collect()
    progress = rates.group_by("instance", "start", "end").agg(
        pl.col("increase").sum().alias("progress"), pl.col("reset").any().alias("reset"))
    pending = (as_text(_ordered(samples, named(rules.pending), ("instance", "value"))).collect()
               .group_by("instance", "at").agg(pl.col("value").max().alias("pending")))
    intervals = progress.join(pending.rename({"at": "end"}), on=["instance", "end"], how="left")
    flat = (intervals.with_columns(((pl.col("progress") == 0) & ~pl.col("reset")
                                    & (pl.col("pending").fill_null(0) > 0)).alias("stalled"))
            .sort("instance", "start"))
    # Consecutive stalled intervals of an instance form one window.
    windows = (flat.with_columns((pl.col("stalled") != pl.col("stalled").shift(1).over("instance"))
                                 .fill_null(True).cum_sum().over("instance").alias("run"))
               .filter(pl.col("stalled"))
               .group_by("instance", "run")
               .agg(pl.col("start").min(), pl.col("end").max(), pl.len().alias("intervals"),
                    pl.col("pending").max().alias("pending_peak"))
               .filter((pl.col("end") - pl.col("start")).dt.total_microseconds() >= min_seconds * 1e6)
               .sort("instance", "start").drop("run"))
    return windows.with_columns(pl.format(
        "{} did not move while {} stayed above zero (peak {}) for {} interval(s)",
        pl.lit(" / ".join(rules.progress)), pl.lit(" / ".join(rules.pending)), "pending_peak", "intervals")
        .alias("evidence"))
