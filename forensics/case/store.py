"""How a case lies on disk: each frame a Hive-partitioned Parquet dataset by host.

    CASE/events/host=gpu-node-00/part-0.parquet     a host's journal records (any number of parts)
    CASE/samples/host=gpu-node-00/part-0.parquet    its metric samples
    CASE/stacks/host=gpu-node-00/part-0.parquet     its py-spy frames
    CASE/quarantine/part-000003-000000.parquet      unreadable records, one part per input part

The host is in the folder name only (the Hive convention: `host=` then the name percent-encoded, a
missing host as `__HIVE_DEFAULT_PARTITION__`), so pandas (pyarrow), polars, DuckDB and Spark read a
frame's folder as it is and give `host` back as a column. Ingest writes each input's rows to its
hosts' folders as it reads them (`write_part`); `finish_partition` then makes each host folder one
file with the frame's full set of columns, dropping records that reached the case twice (they
come from the same journal, so they meet in the same host folder). Every write goes to a hidden
name first and is renamed into place, so a writer killed mid-file leaves no part a reader takes.

A case may also lie in an object store, named by an fsspec URL (`s3://bucket/cases/x`; see
`forensics.case.places`): the same layout, read by polars' own cloud reader and written through fsspec. An
object appears whole or not at all when its upload ends, so parts are written in place there.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote

import polars as pl

from forensics.case.places import Place, is_remote, location, place_text
from forensics.sources.common.schema import SCHEMAS
from forensics.sources.journal.cursor import WHOLE_FROM, cursor_identity, has_cursor, whole_cursor


PARTITION = "host"
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
PARTS = "*.parquet"  # what a reader takes from a folder (hidden `.tmp-*` files of a killed writer are not)
# LZ4: the case is the analysis's working copy, written once per ingest and read by every later
# question, so its codec is chosen for time, not size (the 1 M reference's events, written alone,
# best of 3, twice: zstd level 1 0.74-0.79 CPU-s, LZ4 0.61-0.63; read back whole 0.25-0.31 against
# 0.23; a last-progress query 0.09-0.11 against 0.07; the file 25 -> 46 MiB). Row groups of 32 k
# rows: the writer builds each one's dictionaries and pages from fewer, shorter runs (writing the
# 1 M reference's events took 0.55 s with polars' default, ~65 k rows, and 0.50 s so, the file 1%
# larger); a reader skips by statistics in finer steps too.
WRITE_OPTIONS = {"compression": "lz4", "statistics": True, "row_group_size": 32_768}
# What one journal record keeps through every form it is exported in (export, JSON, a .journal
# that systemd-journal-remote rebuilt from an export, which gets cursors of its own); the host is
# the partition.
RECORD_IDENTITY = ("_BOOT_ID", "__MONOTONIC_TIMESTAMP", "__REALTIME_TIMESTAMP", "pid", "message")


def partition_name(host: str | None) -> str:
    """The folder of a host's rows: `host=` and the name percent-encoded (a name is data from the
    evidence: `/`, `..` or `%` in it must not reach the path)."""
    return f"{PARTITION}={NULL_PARTITION if host is None else quote(host, safe='')}"


# A row group's rows hold at most about this many bytes: a writer holds a whole group before it
# writes it, and 32 k rows of 1 MiB journal entries would be 32 GiB (sized by the rows' mean size).
GROUP_BYTES = 64 << 20


def group_rows(row_bytes: float) -> int:
    """The rows a row group holds when its rows are `row_bytes` each (in memory): WRITE_OPTIONS'
    number, fewer for rows so big that as many would pass GROUP_BYTES."""
    return max(1, min(WRITE_OPTIONS["row_group_size"], int(GROUP_BYTES // max(row_bytes, 1.0))))


def _stored_row_bytes(parts: list[Path]) -> float:
    """The mean size of a row of Parquet files `parts` uncompressed, from their footers alone."""
    import pyarrow.parquet as pq

    metas = [pq.read_metadata(part) for part in parts]
    rows = sum(meta.num_rows for meta in metas)
    stored = sum(meta.row_group(i).total_byte_size for meta in metas for i in range(meta.num_row_groups))
    return stored / rows if rows else 0.0


def _write(frame: pl.DataFrame | pl.LazyFrame, path: Place, row_bytes: float | None = None) -> None:
    """`frame` as Parquet at `path`, written under a hidden name and renamed into place (in an
    object store: written aside on local disk and uploaded, which makes it appear whole). Row
    groups sized by `group_rows` from `row_bytes` (a lazy frame's mean row size; a frame's own)."""
    if is_remote(path):
        with tempfile.TemporaryDirectory(prefix="forensics-upload-") as aside:
            local = Path(aside) / path.name
            _write(frame, local, row_bytes)
            path.fs.put_file(str(local), path.path)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    hidden = path.with_name(f".tmp-{os.getpid()}-{path.name}")
    if isinstance(frame, pl.LazyFrame):
        options = {**WRITE_OPTIONS, "row_group_size": group_rows(row_bytes or 0.0)}
        frame.sink_parquet(hidden, **options)  # type: ignore[arg-type]
    else:
        options = {**WRITE_OPTIONS, "row_group_size": group_rows(frame.estimated_size() / max(frame.height, 1))}
        frame.write_parquet(hidden, **options)  # type: ignore[arg-type]
    os.replace(hidden, path)


def write_part(folder: Place, name: str, rows: pl.DataFrame, tag: str) -> list[str | None]:
    """Write `rows` of frame `name` into the case folder being built, each host's rows to its
    partition as `part-TAG.parquet`; the hosts written to."""
    if rows.is_empty():
        return []
    if name not in SCHEMAS:
        _write(rows, folder / name / f"part-{tag}.parquet")
        return []
    hosts: list[str | None] = []
    for host, part in by_host(rows):
        write_host_part(folder / name / partition_name(host), part, tag)
        hosts.append(host)
    return hosts


def write_host_part(partition: Place, rows: pl.DataFrame, tag: str) -> None:
    """One host's `rows` (without `host`) into its folder `partition` as `part-TAG.parquet`."""
    _write(rows, partition / f"part-{tag}.parquet")


def hosts_in(rows: pl.DataFrame) -> list[str | None]:
    """The hosts of `rows` of a partitioned frame, in order of first appearance."""
    return [None if host is None else str(host)
            for host in rows.get_column(PARTITION).unique(maintain_order=True).to_list()]


def by_host(rows: pl.DataFrame) -> list[tuple[str | None, pl.DataFrame]]:
    """`rows` of a partitioned frame split by host, in order of first appearance, each without the
    `host` column (it is the folder's name)."""
    hosts = hosts_in(rows)
    if len(hosts) == 1:  # one host (the usual input): as it is, not split into a copy
        return [(hosts[0], rows.drop(PARTITION))]
    return [(None if key[0] is None else str(key[0]), part)
            for key, part in rows.partition_by(PARTITION, as_dict=True, include_key=False, maintain_order=True).items()]


def write_empty(folder: Place, name: str, schema: Mapping[str, pl.DataType]) -> None:
    """A frame with no rows as a dataset readers can still open: one file of its columns (in the
    partition of no host for the partitioned frames)."""
    empty = pl.DataFrame(schema={k: v for k, v in schema.items() if name not in SCHEMAS or k != PARTITION})
    where = folder / name / partition_name(None) if name in SCHEMAS else folder / name
    _write(empty, where / "part-0.parquet")


def columns_of(name: str, extras: list[str]) -> dict[str, pl.DataType]:
    """A frame's columns in the order a case gives them: the schema's, then extra journal fields
    (always text) in name order."""
    schema = dict(SCHEMAS[name])
    schema.update((extra, pl.String()) for extra in sorted(set(extras) - set(schema)))
    return schema


def _scan(files: Place, **options: object) -> pl.LazyFrame:
    """Parquet files named by `files` (a glob), lazily: a local path, or a URL that polars' own
    cloud reader takes (it reads the same AWS_* settings as fsspec)."""
    return pl.scan_parquet(files if not is_remote(files) else place_text(files), **options)  # type: ignore[arg-type]


def scan_frame(folder: Place, name: str, extras: list[str] | None = None) -> pl.LazyFrame:
    """A frame of the case at `folder`, lazily, in the canonical column order, `host` included."""
    if name not in SCHEMAS:
        return _scan(folder / name / PARTS)
    schema = columns_of(name, extras or [])
    stored = {k: v for k, v in schema.items() if k != PARTITION}
    scan = _scan(folder / name / "*" / PARTS, hive_partitioning=True, hive_schema={PARTITION: pl.String},
                           schema=stored, missing_columns="insert")
    return _whole(name, scan.select(pl.col(PARTITION).cast(schema[PARTITION]) if c == PARTITION else pl.col(c)
                                    for c in schema))


def _whole(name: str, scan: pl.LazyFrame) -> pl.LazyFrame:
    """A frame as read from the case, its values whole: `events`' `__CURSOR` written back where the
    case holds it as values (`forensics.sources.journal.cursor`; done only if the column is read)."""
    return scan.with_columns(whole_cursor()) if name == "events" else scan


def scan_partition(folder: Place, name: str, host: str | None, extras: list[str] | None = None) -> pl.LazyFrame:
    """One host's rows of a frame of the case at `folder`, lazily, as `scan_frame` gives them."""
    schema = columns_of(name, extras or [])
    stored = {k: v for k, v in schema.items() if k != PARTITION}
    scan = _scan(folder / name / partition_name(host) / PARTS, schema=stored, missing_columns="insert")
    return _whole(name, scan.select(pl.lit(host, schema[PARTITION]).alias(PARTITION) if c == PARTITION else pl.col(c)
                                    for c in schema))


def _with_columns(rows: pl.DataFrame, schema: Mapping[str, pl.DataType]) -> pl.DataFrame:
    """`rows` with exactly `schema`'s columns, in its order (those it lacks as nulls). Made of the
    columns themselves: a select over rows in many pieces would copy them into one."""
    present = set(rows.columns)  # once: asked of the frame per column, the names were listed anew each time
    return pl.DataFrame([rows.get_column(c) if c in present
                         else pl.repeat(None, rows.height, dtype=kind, eager=True).alias(c) for c, kind in schema.items()],
                        height=rows.height)


def partition_rows(rows: pl.DataFrame, name: str, host: str | None, extras: list[str] | None = None,
                   columns: list[str] | None = None) -> pl.DataFrame:
    """One host's rows of a frame still in memory (`finish_held`'s), as `scan_partition` gives the
    same rows from the file (`host` included), narrowed to `columns` if given; no value copied."""
    schema = columns_of(name, extras or [])
    wanted = schema if columns is None else {c: schema[c] for c in columns}
    stored = _with_columns(rows, {c: kind for c, kind in wanted.items() if c != PARTITION})
    if name == "events" and "__CURSOR" in wanted:  # whole, as the file's reader gives it
        whole = _with_columns(rows, {c: schema[c] for c in WHOLE_FROM}).select(whole_cursor()).to_series()
        stored = stored.with_columns(whole)
    return pl.DataFrame([pl.repeat(host, rows.height, dtype=kind, eager=True).alias(c) if c == PARTITION
                         else stored.get_column(c) for c, kind in wanted.items()], height=rows.height)


NO_REPEATS = pl.DataFrame(schema={"_row": pl.UInt32, "source_file": pl.String})  # what a repeat search finds


def _repeat_rows(scan: pl.LazyFrame, key: pl.Expr, repeat: pl.Expr) -> pl.DataFrame:
    """`_row` and `source_file` of the rows where `repeat` holds among those whose `key` hash occurs
    more than once: only the hashes are held for every row, the rows themselves for the few suspects."""
    hashes = scan.select("_row", key.hash().alias("_hash")).collect(engine="streaming")
    # Most folders hold no repeat: sorted, equal hashes are neighbours, which is found in a third of
    # the time a hash table of every row takes (measured at 1 M rows: 0.05 s against 0.12 s).
    ordered = hashes.get_column("_hash").sort()
    if not (ordered.slice(1) == ordered.slice(0, max(ordered.len() - 1, 0))).any():
        return NO_REPEATS.clear()
    suspects = hashes.filter(pl.col("_hash").is_duplicated()).get_column("_row")
    rows = scan.filter(pl.col("_row").is_in(suspects.implode())).collect(engine="streaming").sort("_row")
    return rows.filter(repeat).select("_row", pl.col("source_file").cast(pl.String))


def repeated_records(scan: pl.LazyFrame, columns: Mapping[str, pl.DataType]) -> pl.DataFrame:
    """The rows of one host's `events` (`scan`, with a `_row` number in input order) that an earlier
    row already gave: the same `__CURSOR` and entry, or — from another input, as cursors differ
    between a journal and its copies — the same boot, both clocks, pid and message. Repeats within
    one input with different cursors are kept (journald logs identical lines)."""
    found = []
    if "__CURSOR" in columns:
        # the same cursor (compared as the case holds it: text or values) and the same entry: a
        # cursor a collector reused for another entry (Vector's test journal has one) is no repeat
        cursor = cursor_identity(texts=scan.select(pl.col("__CURSOR").is_not_null().any()).collect().item())
        found.append(_repeat_rows(scan, cursor, has_cursor() & ~pl.struct(cursor, "ts", "message").is_first_distinct()))
    inputs = scan.select(pl.col("source_file").n_unique()).collect().item()
    if inputs > 1 and set(RECORD_IDENTITY) <= set(columns):
        identity = pl.struct(*RECORD_IDENTITY)
        # only journal records carry the clocks that make two lines one record
        found.append(_repeat_rows(scan, identity, pl.col("__REALTIME_TIMESTAMP").is_not_null()
                                  & (pl.col("source_file") != pl.col("source_file").first().over(identity))))
    return pl.concat(found).unique("_row") if found else NO_REPEATS.clear()


def _replace(source: Place, target: Place) -> None:
    """Move `source` to `target`, replacing it (a rename here; a copy and delete in an object store)."""
    if is_remote(source):
        source.fs.mv(source.path, target.path)
    else:
        os.replace(source, target)


def _write_text(path: Place, text: str) -> None:
    """`text` at `path`, appearing whole (written aside and renamed; an object store's upload is whole)."""
    if is_remote(path):
        path.write_text(text)
        return
    hidden = path.with_name(f".tmp-{os.getpid()}-{path.name}")
    hidden.write_text(text)
    os.replace(hidden, path)


def finish_held(partition: Place, name: str, extras: list[str], parts: list[pl.DataFrame]
                ) -> tuple[dict[str, int], pl.DataFrame]:
    """`finish_partition` for a host folder whose rows an ingest held in memory (`parts`, in input
    and file order, without `host`): written once as the folder's one file, without repeated
    journal records; how many were dropped per input, and the rows as written."""
    schema = {k: v for k, v in columns_of(name, extras).items() if k != PARTITION}
    # each part given every column first, then put end to end as they are: a select over the
    # joined parts, or a relaxed concat, would copy them all into one piece
    rows = pl.concat([_with_columns(part, schema) for part in parts]) if len(parts) > 1 \
        else _with_columns(parts[0], schema)
    dropped: dict[str, int] = {}
    if name == "events":
        repeats = repeated_records(rows.lazy().with_row_index("_row"), schema)
        if repeats.height:
            dropped = dict(repeats.group_by("source_file").len().iter_rows())
            rows = (rows.with_row_index("_row").filter(~pl.col("_row").is_in(repeats.get_column("_row").implode()))
                    .drop("_row"))
    _write(rows, partition / "part-0.parquet")
    return dropped, rows


def finish_partition(partition: str | Place, name: str, extras: list[str]) -> dict[str, int]:
    """Make one host folder of a frame a single file with every column of the frame (what another
    host's folder has and this one lacks, as nulls), without repeated journal records; how many
    were dropped per input (by its path in the bundle). Safe to run again after being killed at
    any point (a Dask worker that died is retried on another)."""
    partition = location(partition)
    whole, counts = partition / "part-0.parquet.whole", partition / ".dropped.json"
    if whole.exists() and not counts.exists():  # killed before its counts were kept: start again
        whole.unlink()
    if not counts.exists():
        parts = sorted(partition.glob(PARTS), key=str)  # part-INPUT-PIECE: input order, then file order
        schema = {k: v for k, v in columns_of(name, extras).items() if k != PARTITION}
        files = parts if not is_remote(partition) else [place_text(p) for p in parts]
        scan = pl.scan_parquet(files, schema=schema, missing_columns="insert").with_row_index("_row")
        repeats = repeated_records(scan, schema) if name == "events" else None
        if (repeats is None or repeats.is_empty()) and len(parts) == 1 \
                and dict(_scan(parts[0]).collect_schema()) == schema:  # any column order
            return {}  # already one whole file
        dropped = dict(repeats.group_by("source_file").len().iter_rows()) if repeats is not None else {}
        if repeats is not None and repeats.height:
            scan = scan.filter(~pl.col("_row").is_in(repeats.get_column("_row").implode()))
        _write(scan.drop("_row"), whole, _stored_row_bytes(parts) if not is_remote(partition) else None)
        _write_text(counts, json.dumps(dropped))
    if whole.exists():  # written whole: the parts it replaces go
        for part in partition.glob(PARTS):
            part.unlink()
        _replace(whole, partition / "part-0.parquet")
    dropped = json.loads(counts.read_text())
    counts.unlink()
    return dropped
