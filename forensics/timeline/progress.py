"""Progress counting inside the timeline's host tasks: each host's progress lines, narrowed to
what the freeze detector needs (`progress_of`), counted per second (`count_progress`), and per
scheduler its first and last line and the gaps with work pending (`host_progress`). Kept here, in
the timeline, because the host tasks run it while they read; `forensics.detect.progress` turns
the results into findings.

How long a quiet scheduler may be before it counts as frozen, and what shows a quiet spell to be
one long step instead (a long prefill the next line reports done), are the profile's
(`LogRules.progress_rules`): `[logs] freeze_gap_seconds` and `[logs.long_step]`.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from forensics.profiles import Profile, ProgressRules

# a scheduler seen working only once shows no rhythm that could stop (one line quoted in a write-up)
MIN_RHYTHM_LINES = 2
# The next line shows a step done when the rate it reports over the gap accounts for at least this
# share of the step's tokens (stamps are whole seconds: a 3 s gap read as 2 s or 4 s)
DONE_SHARE = 0.5


STREAM = ("component", "host", "tag")  # one scheduler's progress lines: a component on a host, a rank tag
LINE = ("source_file", "source_line", "source_offset", "message")  # where a line is, and its text


def working(profile: Profile) -> pl.Expr:
    """Progress lines that show work. A stack that writes its stats line while idle (vLLM): the
    line shows work only when one of the profile's `working_when` numbers is above zero (or none
    could be read)."""
    working_when = profile.logs.working_when
    working = (pl.any_horizontal(pl.col(c).fill_null(0) > 0 for c in working_when)
               | pl.all_horizontal(pl.col(c).is_null() for c in working_when)) if working_when else pl.lit(True)
    return pl.col("progress").is_not_null() & working


PENDING = ("running_req", "queue_req", "inflight_req")  # a progress line's counts of work pending


def progress_of(read: pl.DataFrame, profile: Profile) -> pl.DataFrame:
    """A read batch's progress lines, narrow — place (`_at`), time, scheduler, kind, the pending
    counts and the profile's `working_when` numbers: what `host_progress` needs of every progress
    line (text as categories, so that nothing holds the batch's text)."""
    numbers = [c for c in dict.fromkeys((*PENDING, *profile.logs.working_when, *profile.logs.progress_rules.fields()))
               if c in read.columns]
    # lazily: the filter then copies only the selected columns, not the whole batch
    return read.lazy().filter(pl.col("progress").is_not_null()).select(
        "_at", "ts", *(pl.col(c).cast(pl.Categorical) for c in (*STREAM, "progress", "unit")), *numbers).collect()


def own_ends(activity: pl.DataFrame) -> pl.DataFrame:
    """When each scheduler's own log ends: per host and component, its last line of any kind; for
    lines that name no component, per host and unit (their file): a paste's own last line, never
    another unnamed file's."""
    last = pl.col("last").max().alias("own_end")
    named = activity.filter(pl.col("component").is_not_null()).group_by("host", "component").agg(last)
    unnamed = activity.filter(pl.col("component").is_null()).group_by("host", "unit").agg(last)
    return pl.concat([named.with_columns(pl.lit(None, pl.String).alias("unit")),
                      unnamed.with_columns(pl.lit(None, pl.String).alias("component"))], how="diagonal_relaxed")


def count_progress(read: pl.DataFrame, lanes: Sequence[str]) -> pl.DataFrame:
    """A read batch's progress lines per second and lane (`lanes`), with the first and last time."""
    return (read.lazy().filter(pl.col("progress").is_not_null())
            .group_by(pl.col("ts").dt.truncate("1s").alias("second"), *lanes)
            .agg(pl.len().alias("lines"), pl.col("ts").min().alias("first"), pl.col("ts").max().alias("last"))
            .with_columns(pl.col(c).cast(pl.Int64 if c.startswith("line_") else pl.String) for c in lanes).collect())


def host_progress(lines: pl.DataFrame, own_end: pl.DataFrame, profile: Profile
                  ) -> tuple[pl.DataFrame, pl.DataFrame, pl.Series]:
    """Of one host's progress lines (`progress_of`, all of them; a task of
    `forensics.timeline.host_read.read_host`): per scheduler (`STREAM`) its lines, first and last time and the
    running and queued requests of its last line; the gaps over the profile's freeze gap after a line
    with work pending, or that were one long step (`long_step`: the line began a step the next one
    shows done), each with the places (`_at`, `_next_at`) of the lines either side; and the places
    of the lines a lean timeline keeps (either side of a gap, each scheduler's first and last)."""
    work = lines.filter(working(profile)).sort("ts", maintain_order=True)
    rules = profile.logs.progress_rules
    streams = (work.group_by(STREAM).agg(pl.len().alias("lines"), pl.col("ts").first().alias("first"),
                                         pl.col("ts").last().alias("last"), pl.col("running_req").last(),
                                         pl.col("queue_req").last(), pl.col("_at").first().alias("_first_at"),
                                         pl.col("_at").last().alias("_last_at")))
    pending = pl.any_horizontal(pl.col(c).fill_null(0) > 0 for c in PENDING if c in work.columns)
    # With no later progress line the gap runs to the scheduler's own last line: a log that simply
    # ends is not a freeze.
    named = own_end.filter(pl.col("component").is_not_null()).select("host", "component", "own_end")
    unnamed = own_end.filter(pl.col("component").is_null()).select("host", "unit",
                                                                   pl.col("own_end").alias("unit_end"))
    gaps = (work.join(named.cast({"host": work.schema["host"], "component": work.schema["component"]}),
                      on=["host", "component"], how="left", nulls_equal=True)
            .join(unnamed.cast({"host": work.schema["host"], "unit": work.schema["unit"]}),
                  on=["host", "unit"], how="left", nulls_equal=True)
            .with_columns(pl.when(pl.col("component").is_null()).then(pl.col("unit_end"))
                          .otherwise(pl.col("own_end")).alias("own_end"))
            .with_columns(pl.col("ts").shift(-1).over(STREAM).alias("next_ts"),
                          pl.col("_at").shift(-1).over(STREAM).alias("_next_at"), *_next_numbers(rules, work.columns))
            .with_columns(((pl.coalesce("next_ts", "own_end") - pl.col("ts")).dt.total_microseconds() / 1e6)
                          .alias("gap_s"), _number(rules.step_tokens, work.columns).alias("step_tokens"))
            .with_columns(_long_step(rules).alias("long_step"))
            .join(streams.select(*STREAM, "lines"), on=list(STREAM), how="left", nulls_equal=True)
            .filter((pl.col("gap_s") > rules.freeze_gap_s) & (pending | pl.col("long_step"))
                    & (pl.col("lines") >= MIN_RHYTHM_LINES))
            .sort("ts", maintain_order=True)
            .select(*STREAM, "ts", "progress", "running_req", "queue_req", "next_ts", "gap_s", "_at", "_next_at",
                    "long_step", "step_tokens", "next_held", "next_rate"))
    either_side = pl.concat([gaps.get_column("_at"), gaps.get_column("_next_at").drop_nulls(),
                             streams.get_column("_first_at"), streams.get_column("_last_at")]).unique()
    return streams.drop("_first_at", "_last_at"), gaps, either_side


def _number(name: str | None, columns: Sequence[str]) -> pl.Expr:
    """A progress line's field as a float, null when the profile names none or the lines lack it."""
    return pl.col(name).cast(pl.Float64) if name and name in columns else pl.lit(None, pl.Float64)


def _next_numbers(rules: ProgressRules, columns: Sequence[str]) -> list[pl.Expr]:
    """The next line's tokens held and step rate (`next_held`, `next_rate`), per scheduler."""
    return [(_number(name, columns).shift(-1).over(STREAM) if name and name in columns
             else pl.lit(None, pl.Float64)).alias(alias)
            for name, alias in ((rules.held_tokens, "next_held"), (rules.step_rate, "next_rate"))]


def _long_step(rules: ProgressRules) -> pl.Expr:
    """Whether a gap was one long step: the line before it began a step of `step_tokens` tokens
    (SGLang's `#new-token` of a Prefill batch line, written as the batch is scheduled) and the next
    line shows them done — the cache holds at least as many (`next_held`), or the rate it reports
    for the step since it began accounts for them over the gap (`next_rate`) — at a rate no slower
    than the profile's floor."""
    step, gap = pl.col("step_tokens"), pl.col("gap_s")
    done = (pl.col("next_held") >= step).fill_null(False) | (pl.col("next_rate") * gap >= step * DONE_SHARE).fill_null(False)
    return (pl.col("next_ts").is_not_null() & (step > 0).fill_null(False) & done
            & (step / gap >= rules.min_tokens_per_s).fill_null(False))
