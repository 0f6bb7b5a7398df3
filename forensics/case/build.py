"""The case store: an incident bundle ingested once into Parquet, reopened lazily in well under a second.

Layout of a case folder (one Parquet dataset per canonical frame, named after it; the three
frames of evidence partitioned by host, Hive style: see `forensics.case.store`)::

    CASE/events/host=H/part-0.parquet   one row per journal record (see `forensics.formats.schema.EVENTS_SCHEMA`)
    CASE/samples/host=H/part-0.parquet  one row per metric sample (`forensics.formats.schema.SAMPLES_SCHEMA`)
    CASE/stacks/host=H/part-0.parquet   one row per py-spy stack frame (`forensics.formats.schema.STACKS_SCHEMA`)
    CASE/quarantine/part-*.parquet      every record that could not be read, with file, place and reason
    CASE/manifest.json                  inputs with sha256, format, records, quarantined, time span;
                                        the partitions of each frame

Ingest streams: each input is read in pieces (a journal export ~16 MB at a time) and every
PART_ROWS records either held in memory (in this process, up to HOLD_BYTES over all inputs:
`Held`; a host folder of held rows is written once, as its one file) or written to their hosts'
folders as one part, so memory holds a part, not the bundle; the inputs, then the host folders,
are tasks that run in this process or on a Dask cluster (`forensics.case.cluster`).
Re-ingesting a bundle rewrites the case whole (written aside, then swapped in under a lock), so
running it twice gives the same case. A case folder carries `.forensics-case`; no other folder is
ever replaced, nor the bundle, a folder above it or one inside it.

A case may lie in an object store instead (`--case s3://bucket/cases/NAME`, any fsspec URL): it is
built on local disk (or by Dask workers beside its place, `.NAME.partial-*`), then put in with its
manifest last. The manifest is what makes a case there — the old one's goes first — so a reader
never takes half a case for a whole one, and a build that fails leaves the old case as it was. A
second writer of the same URL is stopped by a lock object beside the case
(`forensics.case.places.writer_lock`).

Records seen in the same journal through two inputs (overlapping exports: the same `__CURSOR`)
are kept once and counted as duplicates of the later input.
"""

from __future__ import annotations

import fcntl
import fnmatch
import hashlib
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, overload

import polars as pl

from forensics import sources
from forensics.case.bundle import TAR_SKIPPED
from forensics.errors import CaseError, ForensicsError, WrongFormat
from forensics.case.incident import MANIFEST, load_incident
from forensics.case import cluster
from forensics.case.cluster import Progress, Runner
from forensics.formats.schema import EXCERPT_CHARS, QUARANTINE_SCHEMA, SCHEMAS, empty, validate
from forensics.case.places import Place, is_remote, location, place_text, writer_lock
from forensics.case.store import (PARTITION, PARTS, by_host, columns_of, finish_held, finish_partition, hosts_in,
                                  partition_name, scan_frame, write_empty, write_host_part, write_part)

MANIFEST_VERSION = 5  # 4: frames partitioned by host; 5: events' identifiers stored as categories
FRAMES = (*SCHEMAS, "quarantine")
# the bundle's own papers, not evidence: the manifest, notes, what `forensics collect` recorded
IGNORED_NAMES = {MANIFEST, "README.md", ".gitkeep", ".forensics-tar-skipped.json", "collect.json",
                 "could-not-collect.tsv"}
FOLLOW_LINKS_ENV = "FORENSICS_FOLLOW_LINKS"  # 1: read symbolic links that lead out of the bundle


def follow_links_outside() -> bool:  # noqa: N802 - reads like the setting it is
    """Whether symbolic links leading out of a bundle are read (off unless FORENSICS_FOLLOW_LINKS=1)."""
    return os.environ.get(FOLLOW_LINKS_ENV, "") == "1"


# s3fs reads a file under 100 MiB whole before sending it: a few at a time keep memory bounded
UPLOADS_AT_ONCE = 4
CASE_MARKER = ".forensics-case"  # in every case folder: the only folders a new case may replace
OUTPUT_MARKER = ".forensics-report"  # in every report folder: the only folders a report writes into


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


def _size(path: Path) -> int:
    """Bytes of an input: a file's, or every file's in a folder read whole."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else path.stat().st_size


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        with open(file, "rb") as f:
            while block := f.read(1 << 20):
                digest.update(block)
    return digest.hexdigest()


def discover(bundle: Path, listed: list[str] | None = None
             ) -> tuple[list[tuple[Path, sources.Source]], list[dict[str, str]]]:
    """The inputs of a bundle with their formats, and every other file with why it was skipped.
    A directory that a format reads whole (a journal directory) is one input. With `listed` globs
    (incident.toml [inputs]) only matching paths are read, and a glob matching nothing is reported."""
    inputs: list[tuple[Path, sources.Source]] = []
    skipped: list[dict[str, str]] = []
    matched: set[str] = set()

    def wanted(path: Path) -> bool:
        if not listed:
            return True
        relative = str(path.relative_to(bundle))
        hits = [g for g in listed if fnmatch.fnmatch(relative, g)]
        matched.update(hits)
        return bool(hits)

    root = bundle.resolve()
    seen_folders: set[Path] = set()

    def skip(path: Path, reason: str) -> None:
        skipped.append({"path": str(path.relative_to(bundle)), "reason": reason})

    def outside(path: Path) -> str | None:
        """Why `path` is not read: a link leading out of the bundle, a broken link, or a file that
        is not a regular file (a FIFO would block the read forever)."""
        if path.is_symlink():
            target = path.resolve()
            if not target.exists():
                return f"broken symbolic link (to {os.readlink(path)})"
            if target != root and root not in target.parents and not follow_links_outside():
                return (f"symbolic link to {target}, outside the bundle: not followed "
                        f"(set {FOLLOW_LINKS_ENV}=1 to read it)")
        if not path.is_dir() and not path.is_file():
            return "not a regular file (a FIFO, socket or device)"
        return None

    def visit(folder: Path) -> None:
        real = folder.resolve()
        if real in seen_folders:
            skip(folder, f"folder already read through another path ({real}): a symbolic link loop or alias")
            return
        seen_folders.add(real)
        for path in sorted(folder.iterdir()):
            if path.name in IGNORED_NAMES:
                continue
            if (why := outside(path)) is not None:
                skip(path, why)
                continue
            if not path.is_dir() and not wanted(path):
                skip(path, "not among incident.toml [inputs]")
                continue
            if path.is_dir() and ((path / CASE_MARKER).is_file() or (path / OUTPUT_MARKER).is_file()):
                skip(path, "a forensics case or report folder (output, not evidence)")
                continue
            if path.is_dir():
                if path.resolve() in seen_folders:
                    skip(path, f"folder already read through another path ({path.resolve()}): a symbolic link "
                               f"loop or alias")
                    continue
                # a folder read whole (a journal directory) is read by a library that would follow
                # its links: one holding a link out of the bundle is read file by file instead
                links_out = any(outside(p) for p in path.rglob("*") if p.is_symlink())
                try:
                    if links_out:
                        raise WrongFormat(f"{path}: holds links leading out of the bundle")
                    inputs.append((path, sources.detect(path)))
                except WrongFormat:
                    visit(path)
                continue
            try:
                inputs.append((path, sources.detect(path)))
            except WrongFormat as why:
                skip(path, str(why).split(": ", 1)[-1])
            except OSError as error:
                skip(path, f"cannot be read: {error.strerror or error}")

    if not bundle.is_dir():
        raise CaseError(f"{bundle}: not a directory (a bundle is a folder of evidence files, or a tarball of one)")
    visit(bundle)
    if (bundle / TAR_SKIPPED).is_file():
        skipped += json.loads((bundle / TAR_SKIPPED).read_text())
    for glob in listed or []:
        if glob not in matched:
            skipped.append({"path": glob, "reason": "listed in incident.toml [inputs] but matches no file"})
    return inputs, skipped


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


MAX_HOSTS = 4096  # hosts one journal input may name: past that the host fields are forged or damaged
MAX_PARTITION_NAME = 255  # bytes in a folder name (ext4, xfs, btrfs)
# Rows of one input held before they are written as a part: few files, and memory bounded however
# big the input (~150 MB of journal rows)
PART_ROWS = 250_000


def _refuse_hosts(rows: pl.DataFrame, name: str, seen: set[str | None], relative: str, fmt: str
                  ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """`rows` without those whose host cannot be a folder of the case, and those as quarantine
    (one row per record: a py-spy dump's frames are one record): a name too long for a folder
    name, or — in a journal — a host past the first MAX_HOSTS the input names (each host is a
    folder: an input naming a million must not make a million)."""
    hosts = rows.get_column("host").cast(pl.String).unique(maintain_order=True).to_list()
    too_long = [h for h in hosts if h is not None and len(partition_name(h).encode()) > MAX_PARTITION_NAME]
    new = [h for h in hosts if h not in seen and h not in too_long]
    room = max(0, MAX_HOSTS - len(seen)) if name == "events" else len(new)
    seen.update(new[:room])
    if not too_long and len(new) <= room:
        return rows, empty(QUARANTINE_SCHEMA)
    refused_hosts = too_long + new[room:]
    bad = pl.col("host").cast(pl.String).is_in(refused_hosts)
    why = pl.when(pl.col("host").cast(pl.String).is_in(too_long)).then(
        pl.format("host of {} characters: too long for a folder name (forged or damaged); not kept",
                  pl.col("host").cast(pl.String).str.len_chars())).otherwise(
        pl.format("host {}: past the {} hosts one input may name (forged or damaged host fields); not kept",
                  pl.col("host").cast(pl.String), pl.lit(MAX_HOSTS)))
    refused = rows.filter(bad)
    if name == "stacks":  # a dump is the record
        refused = refused.group_by("dump", maintain_order=True).first()
    text = {"events": pl.col("message"), "samples": pl.col("series").cast(pl.String),
            "stacks": pl.col("function").cast(pl.String)}[name]
    offset = pl.col("source_offset").cast(pl.Int64) if "source_offset" in rows.columns else pl.lit(None, pl.Int64)
    quarantine = refused.select(
        pl.lit(relative).alias("source_file"), pl.lit(fmt).alias("format"), offset.alias("offset"),
        pl.col("source_line").cast(pl.Int64).alias("line"), why.alias("reason"),
        text.str.slice(0, EXCERPT_CHARS).fill_null("").alias("excerpt"), pl.lit(None, pl.String).alias("subject"))
    return rows.filter(~bad), quarantine


HOLD_ENV = "FORENSICS_HOLD_BYTES"  # rows an ingest in this process may hold in memory (default 768 MiB; 0: none)
HOLD_BYTES = int(os.environ.get(HOLD_ENV) or 768 << 20)
# A bundle whose input files are bigger than this holds nothing: a fleet's many inputs would keep
# their rows through the rest of the ingest, and the lean timeline that follows reads files anyway.
HOLD_INPUT_BYTES = 128 << 20


class Held:
    """The rows an ingest in this process holds in memory instead of writing them as parts, up to
    `limit` bytes over all its inputs. A host folder whose rows were all held is written once, as
    its one file (no parts to merge), and with `keep_events` its journal rows stay here for the
    analysis' timeline (`events`), which then does not read back the file just written — when the
    case has no more journal rows than `keep_events` (a bigger case's timeline reads its files in
    batches, and the rows are let go once written). An input that finds no room writes what it
    holds as parts and goes on as a part-writing ingest does."""

    def __init__(self, limit: int | None = None, keep_events: int = 0) -> None:
        self.limit, self.keep_events, self.used = HOLD_BYTES if limit is None else limit, keep_events, 0
        self.inputs: dict[int, list[tuple[str, str, pl.DataFrame]]] = {}  # input → (frame, part tag, rows)
        self.spilled: set[int] = set()
        self.events: dict[str | None, pl.DataFrame] = {}  # host → its rows as written (with `keep_events`)
        self._lock = threading.Lock()

    def keep(self, index: int, name: str, tag: str, rows: pl.DataFrame) -> bool:
        """Hold `rows` (frame `name`, the part `tag` they would be written as) of input `index`, if
        there is room and the input has not spilled."""
        size = rows.estimated_size()
        with self._lock:
            if index in self.spilled or self.used + size > self.limit:
                return False
            self.used += size
            self.inputs.setdefault(index, []).append((name, tag, rows))
            return True

    def spill(self, index: int) -> list[tuple[str, str, pl.DataFrame]]:
        """What input `index` holds, given back (to be written as parts or dropped); it holds no more."""
        with self._lock:
            self.spilled.add(index)
            given = self.inputs.pop(index, [])
            self.used -= sum(rows.estimated_size() for _, _, rows in given)
            return given

    def by_partition(self) -> dict[tuple[str, str | None], list[tuple[str, pl.DataFrame]]]:
        """Every held row by frame and host: (part tag, rows without `host`) in input and file order."""
        out: dict[tuple[str, str | None], list[tuple[str, pl.DataFrame]]] = {}
        for index in sorted(self.inputs):
            for name, tag, rows in self.inputs[index]:
                for host, part in by_host(rows):
                    out.setdefault((name, host), []).append((tag, part))
        return out


def _remove_parts(staging: Place, index: int) -> None:
    """Every part one input wrote (it failed part way: the case keeps none of it)."""
    for part in [*staging.glob(f"*/*/part-{index:06d}-*.parquet"), *staging.glob(f"*/part-{index:06d}-*.parquet")]:
        part.unlink()


def ingest_input(bundle: str, relative: str, source_name: str, staging: str, index: int,
                 held: Held | None = None) -> dict[str, Any]:
    """Read one input of `bundle` (at `relative` in it) part by part into the case being built at
    `staging` (or into `held`, while it has room): the input's manifest entry, and what the case
    needs to know of its rows (frame, hosts, extra columns, rows, py-spy dumps, first and last
    time). The unit of work that runs in this process or on a Dask worker; run twice, it writes
    the same files."""
    folder, path, source = location(staging), Path(bundle) / relative, sources.get(source_name)
    entry: dict[str, Any] = {"path": relative, "format": source.name, "sha256": _sha256(path)}
    facts: dict[str, Any] = {"entry": entry, "frame": None, "hosts": set(), "extras": set(), "rows": 0, "dumps": 0,
                             "first": None, "last": None}
    seen_hosts: set[str | None] = set()
    records = parsed = quarantined = 0
    damage, notes = None, []
    waiting: list[pl.DataFrame] = []  # parts read, written together once PART_ROWS are waiting
    refusals: list[pl.DataFrame] = []
    written = 0

    def write() -> None:
        nonlocal written
        name = facts["frame"]
        if waiting:
            rows = pl.concat(waiting, how="diagonal_relaxed") if len(waiting) > 1 else waiting[0]
            tag = f"{index:06d}-{written:06d}"
            if held is not None and held.keep(index, name, tag, rows):
                facts["hosts"].update(hosts_in(rows))
            else:
                for held_name, held_tag, held_rows in held.spill(index) if held is not None else []:
                    write_part(folder, held_name, held_rows, held_tag)
                facts["hosts"].update(write_part(folder, name, rows, tag))
        if refusals:
            write_part(folder, "quarantine", pl.concat(refusals), f"{index:06d}-{written:06d}")
        waiting.clear()
        refusals.clear()
        written += 1

    _remove_parts(folder, index)  # what an attempt on a worker that died left
    try:
        for part in sources.read_in_parts(source, path):
            part.check_accounting(path)
            name = facts["frame"] = part.frame
            rows = part.rows.with_columns(pl.lit(relative).cast(SCHEMAS[name]["source_file"]).alias("source_file"))
            refused = empty(QUARANTINE_SCHEMA)
            if rows.height:
                rows, refused = _refuse_hosts(rows, name, seen_hosts, relative, source.name)
            validate(rows, SCHEMAS[name], name, extra=pl.String if name == "events" else None)
            facts["extras"].update(set(rows.columns) - set(SCHEMAS[name]))
            records += part.records
            parsed += part.parsed - refused.height
            quarantined += part.quarantine.height + refused.height
            facts["rows"] += rows.height
            if name == "stacks":
                facts["dumps"] += rows.select("dump").n_unique()
            if rows.height:
                first, last = rows.select(pl.col("ts").min().alias("first"), pl.col("ts").max().alias("last")).row(0)
                facts["first"] = min(filter(None, (facts["first"], first)), default=None)
                facts["last"] = max(filter(None, (facts["last"], last)), default=None)
                waiting.append(rows)
            refusals += [q for q in (part.quarantine.with_columns(pl.lit(relative).alias("source_file")), refused)
                         if q.height]
            damage, notes = damage or part.damage, notes + part.notes
            if sum(w.height for w in waiting) >= PART_ROWS:
                write()
        write()
    except ForensicsError as error:
        _remove_parts(folder, index)
        if held is not None:
            held.spill(index)
        entry.update(records=0, parsed=0, quarantined=0, error=str(error))
        return {"entry": entry, "frame": None, "hosts": set(), "extras": set(), "rows": 0, "dumps": 0,
                "first": None, "last": None}
    entry.update(records=records, parsed=parsed, quarantined=quarantined)
    if damage:
        entry["error"] = damage
    if notes:
        entry["notes"] = notes
    return facts


def _finish_host(staging: Place, name: str, host: str | None, extras: list[str], held: Held | None,
                 parts: list[tuple[str, pl.DataFrame]]) -> dict[str, int]:
    """One host folder of a frame made whole (`finish_partition`): from the rows `held` for it
    when it has no parts on disk (written once; journal rows kept in `held.events` if it keeps
    them), else with those rows written as parts first."""
    partition = staging / name / partition_name(host)
    if parts and not any(partition.glob(PARTS)):
        dropped, rows = finish_held(partition, name, extras, [rows for _, rows in parts])
        if held is not None and held.keep_events and name == "events":
            held.events[host] = rows
        return dropped
    for tag, rows in parts:  # the input spilled after these were held: they join its parts on disk
        write_host_part(partition, rows, tag)
    return finish_partition(partition, name, extras)


def build_case(bundle: Path, staging: Place, progress: Progress | None = None, run: Runner | None = None,
               held: Held | None = None) -> dict[str, Any]:
    """Every input of `bundle` read into the case folder `staging` (input by input, then host
    folder by host folder; see `forensics.case.store`); returns the manifest (not yet written).
    Run in this process, the inputs' rows are held in memory up to `held`'s limit (a `Held` of the
    default limit if none is given), so that host folders are written once; a bundle of more than
    HOLD_INPUT_BYTES of inputs holds none."""
    run = run or cluster.runner()
    if isinstance(run, cluster.Local):
        held = held if held is not None else Held()
    else:
        held = None  # workers elsewhere write their own parts
    found, skipped = discover(bundle, load_incident(bundle).inputs)
    if held is not None and sum(_size(path) for path, _ in found) > HOLD_INPUT_BYTES:
        held.limit = 0
    root = bundle.absolute()
    run.check_paths([root, staging])
    calls = [(str(root), str(path.relative_to(bundle)), source.name, place_text(staging), index)
             + ((held,) if held is not None else ())
             for index, (path, source) in enumerate(found)]
    read = run.map(ingest_input, calls, "inputs", progress)
    extras = sorted(set().union(*(f["extras"] for f in read if f["frame"] == "events")))
    partitions = {name: sorted({h for f in read if f["frame"] == name for h in f["hosts"]}, key=lambda h: (h is None, h))
                  for name in SCHEMAS}
    duplicates: dict[str, int] = {}
    if held is not None:
        held_parts = held.by_partition()
        held.inputs.clear()  # from here on each host's rows are held by its finishing call alone
        if sum(f["rows"] for f in read if f["frame"] == "events") > held.keep_events:
            held.keep_events = 0  # too many to keep for the timeline: each host's go once written
        finished = run.map(_finish_host, [(staging, name, host, extras if name == "events" else [], held,
                                           held_parts.pop((name, host), []))
                                          for name, hosts in partitions.items() for host in hosts],
                           "partitions", progress)
    else:
        finished = run.map(finish_partition, [(place_text(staging / name / partition_name(host)), name,
                                               extras if name == "events" else [])
                                              for name, hosts in partitions.items() for host in hosts],
                           "partitions", progress)
    for dropped in finished:
        for path, count in dropped.items():
            duplicates[path] = duplicates.get(path, 0) + count
    for name, hosts in partitions.items():
        if not hosts:
            write_empty(staging, name, columns_of(name, extras if name == "events" else []))
    if not any(staging.glob(f"quarantine/{PARTS}")):
        write_empty(staging, "quarantine", QUARANTINE_SCHEMA)

    inputs = [f["entry"] for f in read]
    for facts in read:
        facts["entry"].setdefault("duplicates", duplicates.get(facts["entry"]["path"], 0))
        facts["entry"]["first_ts"], facts["entry"]["last_ts"] = _iso(facts["first"]), _iso(facts["last"])
    rows = {name: sum(f["rows"] for f in read if f["frame"] == name) for name in SCHEMAS}
    firsts = [f["first"] for f in read if f["first"] is not None]
    lasts = [f["last"] for f in read if f["last"] is not None]
    return {
        "version": MANIFEST_VERSION,
        "bundle": bundle.name,
        "inputs": inputs,
        "skipped": skipped,
        "totals": {
            "records": sum(e["records"] for e in inputs),
            "parsed": sum(e["parsed"] for e in inputs),
            "quarantined": sum(e["quarantined"] for e in inputs),
            "duplicates": sum(e["duplicates"] for e in inputs),
            "events": rows["events"] - sum(duplicates.values()),
            "stack_frames": rows["stacks"],
            "stack_dumps": sum(f["dumps"] for f in read),
            "samples": rows["samples"],
        },
        "first_ts": _iso(min(firsts, default=None)),
        "last_ts": _iso(max(lasts, default=None)),
        "layout": {"partitioned_by": PARTITION, "partitions": partitions, "extra_columns": {"events": extras}},
    }


def ingest(bundle: str | Path, case_dir: str | Place, progress: Progress | None = None,
           run: Runner | None = None, held: Held | None = None) -> dict[str, Any]:
    """Read every input of `bundle` into a case at `case_dir` (replaced whole, never half-written);
    returns the manifest. The work runs on `run` (default: this process, or the Dask cluster
    named by FORENSICS_DASK); in this process, rows are held in memory as `held` allows (see
    `build_case`)."""
    bundle = Path(bundle)
    check_case_target(case_dir, bundle)
    if not bundle.is_dir():
        raise CaseError(f"{bundle}: not a directory (a bundle is a folder of evidence files, or a tarball of one)")
    chosen = run or cluster.runner()
    try:
        with staged_case(case_dir, bundle, isinstance(chosen, cluster.Local), progress) as staging:
            manifest = build_case(bundle, staging, progress, chosen, held)
            (staging / "manifest.json").write_text(json.dumps(manifest, indent=2, default=str) + "\n")
    finally:
        if run is None:
            chosen.close()
    return manifest


def read_bundle(bundle: str | Path, progress: Progress | None = None) -> tuple[dict[str, pl.DataFrame], dict[str, Any]]:
    """Every input of `bundle` read and checked, in memory: the case's frames (by name, in time
    order) and its manifest (for small bundles and tests; big ones go through `ingest`)."""
    with tempfile.TemporaryDirectory(prefix="forensics-read-") as scratch:
        manifest = ingest(bundle, Path(scratch) / "case", progress, cluster.Local())
        case = load_case(Path(scratch) / "case")
        frames = {"events": case.events.collect().sort("ts", maintain_order=True),
                  "samples": case.samples.collect().sort("ts", "instance", "source_file", "source_line",
                                                         maintain_order=True),
                  "stacks": case.stacks.collect().sort("ts", "source_file", "source_line", maintain_order=True),
                  "quarantine": case.quarantine.collect()}
    return frames, manifest


def _is_case(folder: Path) -> bool:
    """Whether `folder` is a case this package wrote: its marker, or (cases written before the
    marker) nothing but the frames' folders and a manifest of ours."""
    if (folder / CASE_MARKER).is_file():
        return True
    names = {p.name for p in folder.iterdir()}
    if "manifest.json" not in names or not names <= {*FRAMES, "manifest.json"}:
        return False
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and {"version", "inputs", "totals"} <= manifest.keys()


def _refuse_bundle_overlap(target: Path, given: str | Path, bundle: str | Path | None, what: str) -> None:
    if bundle is None:
        return
    evidence = Path(bundle).expanduser().resolve()
    if target == evidence or target in evidence.parents:
        raise CaseError(f"{given}: refusing to write {what} here: it would replace the bundle {bundle}; "
                        f"give a folder outside it")


def _check_remote_target(case: Place, given: str | Place) -> Place:
    """`case` (in an object store), or CaseError when a case may not be written there: a bucket's
    root, an object of that name, or a prefix holding objects that are not a case of ours."""
    if not case.path.strip("/").count("/"):
        raise CaseError(f"{given}: a case needs a prefix of its own inside the bucket "
                        f"(e.g. {place_text(case).rstrip('/')}/cases/NAME), not the bucket itself")
    try:
        if case.is_file():
            raise CaseError(f"{given}: an object of that name exists; refusing to replace it with a case")
        held = _objects(case)
    except (OSError, PermissionError) as error:
        raise CaseError(f"{given}: cannot be listed ({error}); check the store's address and credentials "
                        "(for S3: AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)") from None
    if held and not (case / CASE_MARKER).is_file():
        raise CaseError(f"{given}: holds {len(held)} objects and is not a forensics case (no {CASE_MARKER}); "
                        f"refusing to replace it — give a new or empty prefix, or remove it yourself")
    return case


def check_case_target(case_dir: str | Place, bundle: str | Path | None = None) -> Place:
    """`case_dir` resolved, or CaseError when writing a case there would destroy something: the
    bundle itself or a folder above it, a file, or a folder holding anything that is not a case of
    ours. (A case inside the bundle is allowed: reading the bundle passes over it.) A URL is
    checked in its object store the same way (`_check_remote_target`)."""
    if is_remote(place := location(case_dir)):
        return _check_remote_target(place, case_dir)
    case = Path(case_dir).expanduser().resolve()
    _refuse_bundle_overlap(case, case_dir, bundle, "a case")
    if case.exists() or case.is_symlink():
        if not case.is_dir() or case.is_symlink():
            raise CaseError(f"{case_dir}: exists and is not a folder; refusing to replace it with a case")
        if any(case.iterdir()) and not _is_case(case):
            raise CaseError(f"{case_dir}: holds files and is not a forensics case (no {CASE_MARKER}); refusing to "
                            f"replace it — give a new or empty folder, or remove it yourself")
    return case


def check_output_target(out_dir: str | Path, bundle: str | Path | None, outputs: Iterable[str]) -> Path:
    """`out_dir` resolved and marked as a report folder, or CaseError when writing the report's
    files there could overwrite something that is not ours: the bundle or a folder above it, or a folder holding other files (one holding only the report's own file names — an output
    folder from before the marker — is taken as ours)."""
    out = Path(out_dir).expanduser().resolve()
    _refuse_bundle_overlap(out, out_dir, bundle, "a report")
    if out.exists() and not out.is_dir():
        raise CaseError(f"{out_dir}: exists and is not a folder")
    if out.is_dir() and not (out / OUTPUT_MARKER).is_file():
        foreign = sorted(p.name for p in out.iterdir() if p.name not in {*outputs, "case", ".case.lock"}
                         and not p.name.startswith(".case.partial-"))
        if foreign:
            raise CaseError(f"{out_dir}: holds files that are not a forensics report ({', '.join(foreign[:3])}"
                            f"{', …' if len(foreign) > 3 else ''}); refusing to write into it — give a new or "
                            f"empty folder")
    case = out / "case"  # ours only when it is a case (its marker, or a case from before the marker)
    if (case.is_symlink() or case.exists()) and (not case.is_dir() or case.is_symlink()
                                                 or (any(case.iterdir()) and not _is_case(case))):
        raise CaseError(f"{out_dir}: its case/ is not a forensics case (no {CASE_MARKER}); refusing to replace "
                        "it — give another --out, or move it away yourself")
    out.mkdir(parents=True, exist_ok=True)
    (out / OUTPUT_MARKER).write_text("forensics report outputs: `forensics report` rewrites the files it made\n")
    return out


@contextmanager
def case_lock(case_dir: Path) -> Iterator[None]:
    """Exclusive use of `case_dir` by one writer: a second waits until the first has swapped its
    case in (an advisory lock on a file beside the case). The file is removed when the writer is
    done, so nothing is left beside an output; a waiter that then holds the lock of a file already
    removed sees that its inode is no longer the path's and takes the lock again."""
    case_dir.parent.mkdir(parents=True, exist_ok=True)
    path = case_dir.parent / f".{case_dir.name}.lock"
    while True:
        handle = open(path, "a+b")
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            current = os.stat(path).st_ino
        except FileNotFoundError:
            current = None
        if current == os.fstat(handle.fileno()).st_ino:
            break
        handle.close()  # the holder before us removed the file we locked: lock the new one
    try:
        yield
    finally:
        path.unlink(missing_ok=True)  # while still held: no one can lock this inode and think it current
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def _objects(place: Place) -> list[str]:
    """The objects under `place` in its object store, by full key (not the empty "folders" some
    stores keep, such as SeaweedFS's filer)."""
    found = place.fs.find(place.path, withdirs=False, detail=True)
    return sorted(name for name, info in found.items() if info.get("type") == "file")


def _remove_tree(place: Place) -> None:
    """Every object under `place` in its object store (nothing if there are none)."""
    if objects := _objects(place):
        place.fs.rm(objects)


def _upload(fs: Any, local: str, key: str) -> None:
    """One file of a case built here, put into its object store."""
    fs.put_file(local, key)


def _local_staging_prefix(case: Place) -> str:
    """The name a local build of the case at URL `case` starts with (in the temporary folder), so
    the next ingest of that URL finds and removes what a killed writer left."""
    return f"forensics-case-{hashlib.sha1(place_text(case).encode()).hexdigest()[:12]}-"


@contextmanager
def _staged_remote_case(case: Place, build_here: bool, progress: Progress | None) -> Iterator[Place]:
    """`staged_case` in an object store. Built in this machine's temporary folder (`build_here`:
    one upload of the finished case, its objects counted on `progress`) or, when other machines
    write parts of it, under `.NAME.partial-*` beside the case in the store (then copied server
    side). Either way it goes in object by object with the manifest last, after the old case's
    manifest and objects are gone; the manifest is what makes a case (`load_case` refuses a
    prefix without one), so no reader takes half a case for a whole one. The caller holds the
    case's `writer_lock`, so what is removed first was left by a writer that died."""
    for leftover in case.parent.glob(f".{case.name}.partial-*"):  # what a killed writer left
        _remove_tree(leftover)
    for leftover in Path(tempfile.gettempdir()).glob(f"{_local_staging_prefix(case)}*"):
        shutil.rmtree(leftover, ignore_errors=True)
    fs, manifest = case.fs, case / "manifest.json"
    if build_here:
        staging: Place = Path(tempfile.mkdtemp(prefix=_local_staging_prefix(case)))
        for name in FRAMES:
            staging.joinpath(name).mkdir()
    else:
        staging = case.parent / f".{case.name}.partial-{os.getpid()}-{os.urandom(4).hex()}"
    try:
        (staging / CASE_MARKER).write_text("a forensics case: `forensics ingest` may replace this prefix whole\n")
        yield staging
        if manifest.exists():
            manifest.unlink()  # from here on the old case is no case
        _remove_tree(case)
        if build_here:
            built = sorted(p for p in staging.rglob("*") if p.is_file() and p.name != "manifest.json")
            uploads = [(fs, str(p), f"{case.path}/{p.relative_to(staging).as_posix()}") for p in built]
            cluster.Local(UPLOADS_AT_ONCE).map(_upload, uploads, "objects uploaded", progress)
            fs.put_file(str(staging / "manifest.json"), manifest.path)
        else:
            built = [name for name in _objects(staging) if not name.endswith("/manifest.json")]
            fs.copy(built, [f"{case.path}/{name[len(staging.path):].lstrip('/')}" for name in built])
            fs.copy((staging / "manifest.json").path, manifest.path)
    finally:
        if build_here:
            shutil.rmtree(staging, ignore_errors=True)
        else:
            _remove_tree(staging)


@contextmanager
def staged_case(case_dir: str | Place, bundle: str | Path | None = None, build_here: bool = True,
                progress: Progress | None = None) -> Iterator[Place]:
    """A folder to build the case in, swapped in place of `case_dir` when the block ends without
    error (removed otherwise). Built beside it and swapped under a lock, so a reader never sees
    half a case and two writers never mix theirs; what a killed writer left aside is removed by
    the next one. Refuses (CaseError) any place `check_case_target` refuses. In an object store:
    `_staged_remote_case` under its `writer_lock` (`build_here` False when workers elsewhere
    write parts of it); there a second writer is refused rather than kept waiting."""
    if is_remote(place := location(case_dir)):
        _check_remote_target(place, case_dir)
        with writer_lock(place), _staged_remote_case(place, build_here, progress) as staging:
            yield staging
        return
    case_dir = Path(case_dir).expanduser()
    with case_lock(case_dir.resolve()):
        case_dir = check_case_target(case_dir, bundle)
        for leftover in case_dir.parent.glob(f".{case_dir.name}.partial-*"):
            shutil.rmtree(leftover, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{case_dir.name}.partial-", dir=case_dir.parent))
        try:
            (staging / CASE_MARKER).write_text("a forensics case: `forensics ingest` may replace this folder whole\n")
            for name in FRAMES:
                (staging / name).mkdir()
            yield staging
            retired = None
            if case_dir.exists():
                retired = case_dir.with_name(f".{case_dir.name}.partial-old-{os.getpid()}")
                case_dir.rename(retired)
            staging.rename(case_dir)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        if retired is not None:
            shutil.rmtree(retired, ignore_errors=True)


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
    if manifest.get("version") != MANIFEST_VERSION:
        raise CaseError(f"{manifest_path}: case version {manifest.get('version')}, this forensics reads "
                        f"{MANIFEST_VERSION}; re-ingest the bundle")
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
