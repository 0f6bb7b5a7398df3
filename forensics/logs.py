"""Log lines read with a profile's `[logs]` rules: progress lines with their numbers, health checks,
readiness, and the line kinds worth a finding — all as polars expressions over the `events` frame.

For SGLang that is `[2026-06-18 21:34:47 TP0] Decode batch. #running-req: 12, …`: the prefix gives
the line's own local time (`stamp`, kept raw; `forensics.align` turns it into UTC) and the scheduler
tag (`DP0 TP3 EP3`, `PP1 TP0`, none on one GPU), the progress pattern the kind (Prefill / Decode),
and each `[logs.fields]` entry one numeric column.
"""

from __future__ import annotations

import polars as pl

from forensics.profiles import LogRules, Profile, load_profile

RANKS = ("dp", "tp", "pp", "ep")


def read_lines(events: pl.DataFrame | pl.LazyFrame, profile: Profile | None = None) -> pl.LazyFrame:
    """`events` with the profile's reading of each message: stamp, tag, ranks, progress kind, one
    column per field of a progress line, HTTP method / path / status of access lines, health_ok,
    ready, and event kind / track.

    Field patterns run on progress lines only (a small share of a big journal), joined back."""
    rules: LogRules = (profile or load_profile()).logs
    frame = events.lazy() if isinstance(events, pl.DataFrame) else events
    message = pl.col("message").fill_null("")
    prefix = message.str.extract_groups(rules.prefix)
    kind = message.str.extract(rules.progress.replace("(?P<kind>", "("), 1) if "(?P<kind>" in rules.progress \
        else pl.when(message.str.contains(rules.progress)).then(pl.lit("progress"))
    # The notable-line rules rarely match: one pass finds the candidates, the rules run on those.
    rare = [e.pattern for e in rules.events] + [rules.health_ok, rules.ready]
    frame = frame.with_row_index("_row").with_columns(
        prefix.struct.field("stamp").alias("stamp"), prefix.struct.field("tag").alias("tag"), kind.alias("progress"),
        message.str.contains("|".join(f"(?:{p})" for p in rare)).alias("_rare"))
    event_kind = pl.lit(None, pl.String)
    event_track = pl.lit(None, pl.String)
    for event in reversed(rules.events):  # the first matching rule wins
        hit = message.str.contains(event.pattern)
        event_kind = pl.when(hit).then(pl.lit(event.kind)).otherwise(event_kind)
        event_track = pl.when(hit).then(pl.lit(event.track)).otherwise(event_track)
    notable = frame.filter(pl.col("_rare")).select(
        "_row", message.str.contains(rules.health_ok).alias("health_ok"),
        message.str.contains(rules.ready).alias("ready"), event_kind.alias("event"), event_track.alias("track"))
    frame = frame.join(notable, on="_row", how="left", maintain_order="left").with_columns(
        pl.col("health_ok").fill_null(False), pl.col("ready").fill_null(False)).drop("_rare")
    access = (frame.filter(message.str.contains(" HTTP/", literal=True))
              .select("_row", message.str.extract_groups(rules.access).alias("_a"))
              .select("_row", pl.col("_a").struct.field("method").alias("http_method"),
                      pl.col("_a").struct.field("path").alias("http_path"),
                      pl.col("_a").struct.field("status").cast(pl.Int16, strict=False).alias("http_status")))
    frame = frame.join(access, on="_row", how="left", maintain_order="left")
    tag = pl.col("tag").fill_null("")
    fields = (frame.filter(pl.col("progress").is_not_null())
              .select("_row", *[message.str.extract(regex, 1).cast(pl.Float64, strict=False).alias(name)
                                for name, regex in rules.fields.items()]))
    return (frame.join(fields, on="_row", how="left", maintain_order="left")
            .with_columns(*[tag.str.extract(rf"\b{r.upper()}(\d+)\b", 1).cast(pl.Int32).alias(f"line_{r}")
                            for r in RANKS])
            .drop("_row"))
