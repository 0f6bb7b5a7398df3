"""A case opened for reading: its frames as lazy polars frames (or pandas DataFrames) and its
manifest, from a folder or an object store, in well under a second; what a case is made of
(`FRAMES`, the manifest's version, the marker in every case folder), and summaries of what it holds.
The case is written by `forensics.case.build`, which describes its layout.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, overload

import polars as pl

from forensics.errors import CaseError
from forensics.sources.common.schema import SCHEMAS
from forensics.case.places import Place, location
from forensics.case.store import partition_name, partition_rows, scan_frame

# 4: frames partitioned by host; 5: events' identifiers stored as categories; 6: journald's cursors
# held as their values (`forensics.sources.journal.cursor`)
MANIFEST_VERSION = 6
# versions this forensics reads: a version 5 case has every cursor as text, which is read as it is
READABLE_VERSIONS = (5, 6)
FRAMES = (*SCHEMAS, "quarantine")
CASE_MARKER = ".forensics-case"  # in every case folder: the only folders a new case may replace


def to_pandas(frame: pl.DataFrame | pl.LazyFrame) -> Any:
    """A polars frame as pandas with the dtypes an analyst expects: time zone-aware UTC timestamps
    (`datetime64[us, UTC]`), categoricals as `category`, text as Arrow-backed strings, integers
    and booleans as pandas' nullable types (a missing pid stays missing, not NaN), lists and
    structs (labels, locals, raw fields) as Arrow-backed columns — no Python objects per cell."""
    import pandas as pd
    import pyarrow as pa

    nullable = {pa.int8(): pd.Int8Dtype(), pa.int16(): pd.Int16Dtype(), pa.int32(): pd.Int32Dtype(),
                pa.int64(): pd.Int64Dtype(), pa.uint8(): pd.UInt8Dtype(), pa.uint16(): pd.UInt16Dtype(),
                pa.uint32(): pd.UInt32Dtype(), pa.uint64(): pd.UInt64Dtype(), pa.bool_(): pd.BooleanDtype()}

    def mapped(kind: pa.DataType) -> Any:
        if kind in nullable:  # integers stay integers where a value is missing (not float NaN)
            return nullable[kind]
        if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
            return pd.StringDtype("pyarrow")
        if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_struct(kind) \
                or pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_binary_view(kind):
            return pd.ArrowDtype(kind)
        return None

    table = (frame.collect() if isinstance(frame, pl.LazyFrame) else frame).to_arrow()
    return table.to_pandas(types_mapper=mapped, coerce_temporal_nanoseconds=False)


@dataclass
class Case:
    """An opened case: lazy frames and the manifest."""

    path: Place
    events: pl.LazyFrame
    samples: pl.LazyFrame
    stacks: pl.LazyFrame
    quarantine: pl.LazyFrame
    manifest: dict[str, Any]
    # host → its `events` rows still in memory from the ingest that wrote them (`Held.events`), for
    # the timeline to read instead of the file; empty for a case opened from disk
    held_events: dict[str | None, pl.DataFrame] = field(default_factory=dict)

    def events_of(self, columns: list[str]) -> pl.LazyFrame:
        """`events` narrowed to `columns`, host folder after host folder as the files give them: from
        the rows an ingest in this process still holds (`held_events`) when it holds every host's,
        else from the files (a question asked before the timeline takes those rows over)."""
        layout = self.manifest.get("layout", {})
        hosts = layout.get("partitions", {}).get("events")
        if not self.held_events or hosts is None or set(self.held_events) != set(hosts):
            return self.events.select(columns)
        extras = layout.get("extra_columns", {}).get("events")
        return pl.concat([partition_rows(self.held_events[host], "events", host, extras, columns)
                          for host in sorted(self.held_events, key=partition_name)]).lazy()

    def to_pandas(self, frame: str, columns: list[str] | None = None, where: pl.Expr | None = None) -> Any:
        """One of the case's frames (`events`, `samples`, `stacks`, `quarantine`) as a pandas
        DataFrame (`forensics.case.to_pandas`), narrowed first by `columns` and a polars `where`
        (pushed down to the Parquet read, so only what is asked for is loaded)."""
        if frame not in FRAMES:
            raise CaseError(f"no frame {frame!r} in a case; there are {', '.join(FRAMES)}")
        lazy: pl.LazyFrame = getattr(self, frame)
        if where is not None:
            lazy = lazy.filter(where)
        if columns is not None:
            lazy = lazy.select(columns)
        return to_pandas(lazy)


@overload
def load_case(path: str | Place, backend: Literal["polars"] = "polars") -> Case: ...
@overload
def load_case(path: str | Place, backend: Literal["pandas"]) -> dict[str, Any]: ...


def load_case(path: str | Place, backend: str = "polars") -> Case | dict[str, Any]:
    """Open a case folder: lazy `events`, `samples`, `stacks` and `quarantine` frames plus the
    manifest. With `backend="pandas"`: a dict of those four frames as pandas DataFrames (read
    whole: for big cases, `load_case(path).to_pandas(frame, columns, where)` reads less)."""
    if backend == "pandas":
        case = load_case(path)
        return {name: case.to_pandas(name) for name in FRAMES}
    if backend != "polars":
        raise CaseError(f"backend must be polars or pandas, not {backend!r}")
    path = location(path)
    manifest_path = path / "manifest.json"
    if not manifest_path.is_file():
        if (path / CASE_MARKER).is_file():
            raise CaseError(f"{path}: an ingest into this case did not finish (no manifest.json); run "
                            f"`forensics ingest BUNDLE --case {path}` again")
        raise CaseError(f"{path}: not a case (no manifest.json); "
                        f"create one with `forensics ingest BUNDLE --case {path}`")
    manifest = json.loads(manifest_path.read_text())
    if manifest.get("version") not in READABLE_VERSIONS:
        raise CaseError(f"{manifest_path}: case version {manifest.get('version')}, this forensics reads "
                        f"{' and '.join(map(str, READABLE_VERSIONS))}; re-ingest the bundle")
    frames = {}
    extras = manifest.get("layout", {}).get("extra_columns", {})
    for name in FRAMES:
        dataset = path / name
        if not dataset.is_dir():
            raise CaseError(f"{path}: missing the {name} dataset ({dataset})")
        frames[name] = scan_frame(path, name, extras.get(name))
    return Case(path, frames["events"], frames["samples"], frames["stacks"], frames["quarantine"], manifest)


def host_unit_summary(case: Case) -> pl.DataFrame:
    """Records per host and unit with their first and last time."""
    return (case.events.group_by("host", "unit")
            .agg(pl.len().alias("records"), pl.col("ts").min().alias("first"), pl.col("ts").max().alias("last"))
            .sort("host", "unit", nulls_last=True).collect())


def instance_summary(case: Case | pl.LazyFrame) -> pl.DataFrame:
    """Per metrics instance and source format: scrapes (or API points), series, samples, first and
    last time — of a case, or of a `samples` frame (a timeline's, say)."""
    samples = case.samples if isinstance(case, Case) else case
    return (samples.group_by(pl.col("instance").cast(pl.String), pl.col("format").cast(pl.String))
            .agg(pl.col("ts").n_unique().alias("times"), pl.col("series").n_unique().alias("series"),
                 pl.len().alias("samples"), pl.col("ts").min().alias("first"), pl.col("ts").max().alias("last"))
            .sort("instance", "format", nulls_last=True).collect())
