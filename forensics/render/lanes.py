"""Swimlane names: the lane of a log line (host · component or unit · rank), of a py-spy rank and
of health checks, the order lanes are drawn in, and the rows a person marked."""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

import polars as pl

from forensics.analyze import Analysis


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


def lane_order(lanes: list[str], involved: Collection[str | None]) -> list[str]:
    """Lanes of the hosts findings or stacks name first — in `involved`'s order when it has one,
    the host at fault first — then the rest, each by name with its numbers compared as numbers
    (TP8 before TP10, node-2 before node-10)."""
    rank = {host: n for n, host in enumerate(involved)} if not isinstance(involved, (set, frozenset)) else (
        dict.fromkeys(involved, 0))
    return sorted(set(lanes), key=lambda lane: (rank.get(lane.split(" · ", 1)[0], len(rank)), natural_key(lane)))


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


HEALTH_LANE = " · health checks"


def health_lines(events: pl.DataFrame) -> pl.DataFrame:
    """Access lines of health checks (answered OK by the profile's `health_ok`, or a /health
    request with a status), each in its component's health lane (beside, not over, its log)."""
    if "http_path" not in events.columns:
        return events.clear().select("ts", "lane", "health_ok")
    return (events.filter(pl.col("health_ok") | (pl.col("http_path").str.starts_with("/health")
                                                 & pl.col("http_status").is_not_null()))
            .select("ts", pl.col("lane") + HEALTH_LANE, "health_ok"))
