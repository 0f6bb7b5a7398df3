"""What the two py-spy readers share: capture context per dump, ranks from titles, the `stacks` frame.

py-spy (https://github.com/benfred/py-spy) prints a process's Python threads innermost frame
first, as text (`py-spy dump --pid N`) or JSON (`--json`). Neither form carries a capture time,
and `--json` carries no process title either: both come from the bundle (`forensics.sources.common.snapshot_time`).

Ranks come from the process title the way serving stacks set it, e.g. SGLang's
`sglang::scheduler_DP0_TP3_EP3` or `sglang::scheduler_PP1_TP0`: each `DP`/`TP`/`PP`/`EP` followed by
digits and not preceded by a letter is a rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from forensics.sources.common.snapshot_time import Capture, from_header, parse_header
from forensics.sources.common.schema import STACKS_SCHEMA, empty, quarantine_rows
from forensics.sources.common.schema import ParseResult

RANK_KINDS = ("dp", "tp", "pp", "ep")
DATA_TYPE = "pyspy:frame"


@dataclass
class DumpContext:
    """Everything known about one dump before its frames: where, when, and which process."""

    dump: int
    capture: Capture


def rank_expressions(title: pl.Expr) -> list[pl.Expr]:
    """One Int32 column per rank kind, parsed from a process title column."""
    return [title.str.extract(rf"(?:^|[^A-Za-z]){kind.upper()}(\d+)", 1).cast(pl.Int32).alias(kind)
            for kind in RANK_KINDS]


def capture_of(fallback: Capture, header_line: str | None) -> Capture:
    """The capture a dump carries: its header's, else `fallback` (what the file's path or mtime gives)."""
    labels = parse_header(header_line) if header_line is not None else None
    return from_header(labels, fallback) if labels is not None else fallback


def context_frame(contexts: list[DumpContext]) -> pl.DataFrame:
    """Per dump: capture columns from the bundle, plus the header's host, group, pid and title."""
    def label(key: str) -> list[str | None]:
        return [c.capture.labels.get(key) for c in contexts]

    return pl.DataFrame({
        "dump": [c.dump for c in contexts],
        "ts": [c.capture.ts for c in contexts],
        "ts_source": [c.capture.ts_source for c in contexts],
        "ts_confidence": [c.capture.ts_confidence for c in contexts],
        "host": label("host"),
        "group": label("group"),
        "header_pid": label("pid"),
        "header_title": label("title"),
    }, schema_overrides={"dump": pl.Int32, "ts": STACKS_SCHEMA["ts"], "ts_source": pl.String, "ts_confidence": pl.String,
                         # typed even when no dump has a header: a column of nothing but nulls has no type
                         "host": pl.String, "group": pl.String, "header_pid": pl.String, "header_title": pl.String})


def finish_stacks(frames: pl.DataFrame, contexts: pl.DataFrame, fmt: str) -> pl.DataFrame:
    """The canonical `stacks` frame from per-frame rows and per-dump context (joined on `dump`).

    The dump's own pid and title win over the header's, which fill in what the dump lacks
    (`--json` has no title)."""
    joined = frames.join(contexts, on="dump", how="left")
    title = pl.coalesce(pl.col("title"), pl.col("header_title")) if "title" in joined.columns \
        else pl.col("header_title")
    joined = joined.with_columns(
        title.alias("title"),
        pl.coalesce(pl.col("pid"), pl.col("header_pid").cast(pl.Int64, strict=False)).alias("pid"),
        pl.lit(fmt).alias("format"),
        pl.lit(DATA_TYPE).alias("data_type"),
    ).with_columns(rank_expressions(pl.col("title")))
    missing = [pl.lit(None, dtype).alias(name) for name, dtype in STACKS_SCHEMA.items()
               if name not in joined.columns]
    return joined.with_columns(missing).select(
        [pl.col(name).cast(dtype) for name, dtype in STACKS_SCHEMA.items()])


def result(source_file: str, fmt: str, frames: pl.DataFrame | None, contexts: list[DumpContext],
           bad: list[tuple[int | None, str, str, str | None]]) -> ParseResult:
    """What a py-spy reader returns: the good dumps' frames (joined to their context) and a
    quarantine row per bad dump; records = good dumps + bad dumps."""
    quarantine = quarantine_rows(source_file, fmt, bad)
    records = len(contexts) + len(bad)
    if frames is None or not contexts:
        return ParseResult("stacks", empty(STACKS_SCHEMA), quarantine, records, parsed_records=0)
    stacks = finish_stacks(frames, context_frame(contexts), fmt).with_columns(pl.lit(source_file).alias("source_file"))
    return ParseResult("stacks", stacks, quarantine, records, parsed_records=len(contexts))


def subject_of(capture: Capture, pid: int | None = None, title: str | None = None) -> str | None:
    """`key=value` words naming a process whose dump could not be read."""
    labels = dict(capture.labels)
    labels.pop("ts", None)
    if pid is not None:
        labels["pid"] = str(pid)
    if title:
        labels["title"] = title.split()[0]
    return " ".join(f"{k}={v}" for k, v in labels.items()) or None
