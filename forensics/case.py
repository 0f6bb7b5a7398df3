"""The case store: an incident bundle ingested once into Parquet, reopened lazily in well under a second.

Layout of a case folder (one Parquet dataset per canonical frame, named after it)::

    CASE/events/part-0.parquet      one row per journal record (see `forensics.schema.EVENTS_SCHEMA`)
    CASE/samples/part-0.parquet     one row per metric sample (`forensics.schema.SAMPLES_SCHEMA`)
    CASE/stacks/part-0.parquet      one row per py-spy stack frame (`forensics.schema.STACKS_SCHEMA`)
    CASE/quarantine/part-0.parquet  every record that could not be read, with file, place and reason
    CASE/manifest.json              inputs with sha256, format, records, quarantined, time span

Re-ingesting a bundle rewrites the case whole (written aside, then swapped in under a lock), so
running it twice gives the same case. A case folder carries `.forensics-case`; no other folder is
ever replaced, nor the bundle, a folder above it or one inside it. Records seen in the same journal through two inputs (overlapping exports: the
same `__CURSOR`) are kept once and counted as duplicates of the later input.
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
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, overload

import polars as pl

from forensics import sources
from forensics.bundle import TAR_SKIPPED
from forensics.errors import CaseError, ForensicsError, WrongFormat
from forensics.incident import MANIFEST, load_incident
from forensics.schema import (
    EVENTS_SCHEMA,
    QUARANTINE_SCHEMA,
    SAMPLES_SCHEMA,
    STACKS_SCHEMA,
    empty,
    validate,
)
from forensics.sources import ParseResult

MANIFEST_VERSION = 3
#: The canonical frames a case holds, with their schemas (columns beyond them must be String).
SCHEMAS = {"events": EVENTS_SCHEMA, "samples": SAMPLES_SCHEMA, "stacks": STACKS_SCHEMA}
FRAMES = (*SCHEMAS, "quarantine")
# the bundle's own papers, not evidence: the manifest, notes, what `forensics collect` recorded
IGNORED_NAMES = {MANIFEST, "README.md", ".gitkeep", ".forensics-tar-skipped.json", "collect.json",
                 "could-not-collect.tsv"}
FOLLOW_LINKS_ENV = "FORENSICS_FOLLOW_LINKS"  # 1: read symbolic links that lead out of the bundle


def follow_links_outside() -> bool:  # noqa: N802 - reads like the setting it is
    """Whether symbolic links leading out of a bundle are read (off unless FORENSICS_FOLLOW_LINKS=1)."""
    return os.environ.get(FOLLOW_LINKS_ENV, "") == "1"


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

    path: Path
    events: pl.LazyFrame
    samples: pl.LazyFrame
    stacks: pl.LazyFrame
    quarantine: pl.LazyFrame
    manifest: dict[str, Any]

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


# What one journal record keeps through every form it is exported in (export, JSON, a .journal
# that systemd-journal-remote rebuilt from an export, which gets cursors of its own).
RECORD_IDENTITY = ("host", "_BOOT_ID", "__MONOTONIC_TIMESTAMP", "__REALTIME_TIMESTAMP", "pid", "message")


def _repeated(events: pl.DataFrame, key: pl.Expr, repeat: pl.Expr) -> pl.Series:
    """Row numbers where `repeat` holds among the rows whose `key` hash occurs more than once
    (the expensive comparison runs on those few rows only)."""
    hashes = events.select(key.hash()).to_series()
    # Counting distinct hashes is a third of the cost of marking the repeated ones, and almost
    # every bundle has none.
    if hashes.n_unique() == hashes.len():
        return pl.Series(dtype=pl.UInt32)
    suspects = hashes.is_duplicated().arg_true()
    chosen = events[suspects].select(repeat.alias("repeat")).to_series()
    return suspects.filter(chosen)


def _drop_repeated_records(events: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, int]]:
    """`events` without the records an earlier input already gave, and how many were dropped per
    input: the same `__CURSOR`, or — from another input, as cursors differ between a journal and
    its copies — the same host, boot, both clocks, pid and message. Repeats within one input with
    different cursors are kept (journald logs identical lines). Hashes first, the frame is copied
    only when something is dropped."""
    if events.is_empty():
        return events, {}
    columns = set(events.columns)
    drop: list[pl.Series] = []
    if "__CURSOR" in columns:
        # the same cursor and the same entry: a cursor a collector reused for another entry (Vector's
        # test journal has one) is no repeat
        cursor = pl.col("__CURSOR")
        same = pl.struct(cursor, "ts", "message")
        drop.append(_repeated(events, cursor, cursor.is_not_null() & ~same.is_first_distinct()))
    if set(RECORD_IDENTITY) <= columns and events.get_column("source_file").n_unique() > 1:
        identity = pl.struct(*RECORD_IDENTITY)
        first_input = pl.col("source_file").first().over(identity)
        drop.append(_repeated(events, identity, pl.col("source_file") != first_input))
    rows = pl.concat(drop).unique() if drop else pl.Series(dtype=pl.UInt32)
    if rows.is_empty():
        return events, {}
    keep = pl.Series("keep", [True]).extend_constant(True, events.height - 1).scatter(rows, False)
    dropped = dict(events[rows].group_by("source_file").len().iter_rows())
    return events.filter(keep), dropped


def ingest(bundle: str | Path, case_dir: str | Path,
           progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None) -> dict[str, Any]:
    """Read every input of `bundle` into a case at `case_dir`; returns the manifest."""
    check_case_target(case_dir, bundle)
    frames, manifest = read_bundle(bundle, progress)
    write_case(case_dir, frames, manifest, bundle)
    return manifest


def ingest_in_background(bundle: str | Path, case_dir: str | Path) -> tuple[Case, Callable[[], None]]:
    """Read `bundle` and return its case at once, from memory, while the Parquet case is written
    to `case_dir` in a thread (polars writes without holding the GIL, so analysis goes on beside
    it); call the returned function to wait for the write (it raises what the write raised)."""
    check_case_target(case_dir, bundle)
    frames, manifest = read_bundle(bundle)
    failure: list[BaseException] = []

    def write() -> None:
        try:
            write_case(case_dir, frames, manifest, bundle)
        except BaseException as error:  # noqa: BLE001 - handed to the caller by finished()
            failure.append(error)

    writer = threading.Thread(target=write, name="forensics-case-writer")
    writer.start()

    def finished() -> None:
        writer.join()
        if failure:
            raise failure[0]

    case = Case(Path(case_dir), *(frames[name].lazy() for name in FRAMES), manifest)
    return case, finished


def _read_input(bundle: Path, path: Path, source: sources.Source) -> tuple[dict[str, Any], ParseResult | None]:
    """One input's manifest entry and what its parser read (None, and the error in the entry,
    when it could not be read)."""
    entry: dict[str, Any] = {"path": str(path.relative_to(bundle)), "format": source.name, "sha256": _sha256(path)}
    try:
        result = source.parse(path)
        result.check_accounting(path)
    except ForensicsError as error:
        entry.update(records=0, parsed=0, quarantined=0, duplicates=0, error=str(error))
        return entry, None
    entry.update(records=result.records, parsed=result.parsed, quarantined=result.quarantine.height)
    if result.damage:
        entry["error"] = result.damage
    if result.notes:
        entry["notes"] = result.notes
    return entry, result


def read_bundle(bundle: str | Path, progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None
                ) -> tuple[dict[str, pl.DataFrame], dict[str, Any]]:
    """Every input of `bundle` read and checked: the case's frames (by name) and its manifest."""
    bundle = Path(bundle)
    found, skipped = discover(bundle, load_incident(bundle).inputs if bundle.is_dir() else None)
    rows_by_frame: dict[str, list[pl.DataFrame]] = {name: [] for name in SCHEMAS}
    quarantine: list[pl.DataFrame] = []
    inputs: list[dict[str, Any]] = []
    # Inputs are read two at a time (the parsers release the GIL): the scrapes and dumps are read
    # beside the big journal export, and results are taken in bundle order.
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="forensics-input") as pool:
        reads = [pool.submit(_read_input, bundle, path, source) for path, source in found]
        for read in progress(reads) if progress else reads:
            entry, result = read.result()
            inputs.append(entry)
            if result is None:
                continue
            rows_by_frame[result.frame].append(
                result.rows.with_columns(pl.lit(entry["path"]).cast(SCHEMAS[result.frame]["source_file"])
                                         .alias("source_file")))
            quarantine.append(result.quarantine.with_columns(pl.lit(entry["path"]).alias("source_file")))

    events = rows_by_frame["events"]
    all_events = pl.concat(events, how="diagonal_relaxed") if events else empty(EVENTS_SCHEMA)
    # The same journal record reached through two inputs: keep the first.
    all_events, duplicates = _drop_repeated_records(all_events)
    if not all_events.get_column("ts").is_sorted():  # one export is in order already: no copy then
        all_events = all_events.sort("ts", maintain_order=True)
    all_quarantine = pl.concat(quarantine) if quarantine else empty(QUARANTINE_SCHEMA)
    all_stacks = pl.concat(rows_by_frame["stacks"]) if rows_by_frame["stacks"] else empty(STACKS_SCHEMA)
    all_stacks = all_stacks.sort("ts", "source_file", "source_line", maintain_order=True)
    all_samples = pl.concat(rows_by_frame["samples"]) if rows_by_frame["samples"] else empty(SAMPLES_SCHEMA)
    all_samples = all_samples.sort("ts", "instance", "source_file", "source_line", maintain_order=True)
    validate(all_events, EVENTS_SCHEMA, "events")
    validate(all_stacks, STACKS_SCHEMA, "stacks", extra=None)
    validate(all_samples, SAMPLES_SCHEMA, "samples", extra=None)
    validate(all_quarantine, QUARANTINE_SCHEMA, "quarantine", extra=None)

    timed = pl.concat([f.select(pl.col("source_file").cast(pl.String), "ts")
                       for f in (all_events, all_stacks, all_samples)])
    spans = {row[0]: row[1:] for row in timed.group_by("source_file")
             .agg(pl.col("ts").min().alias("first"), pl.col("ts").max().alias("last")).iter_rows()}
    for entry in inputs:
        entry.setdefault("duplicates", duplicates.get(entry["path"], 0))
        first_ts, last_ts = spans.get(entry["path"], (None, None))
        entry["first_ts"], entry["last_ts"] = _iso(first_ts), _iso(last_ts)
    manifest = {
        "version": MANIFEST_VERSION,
        "bundle": bundle.name,
        "inputs": inputs,
        "skipped": skipped,
        "totals": {
            "records": sum(e["records"] for e in inputs),
            "parsed": sum(e["parsed"] for e in inputs),
            "quarantined": sum(e["quarantined"] for e in inputs),
            "duplicates": sum(e["duplicates"] for e in inputs),
            "events": all_events.height,
            "stack_frames": all_stacks.height,
            "stack_dumps": all_stacks.select("source_file", "dump").n_unique(),
            "samples": all_samples.height,
        },
    }
    window = timed.select(pl.col("ts").min().alias("first"), pl.col("ts").max().alias("last")).row(0)
    manifest["first_ts"], manifest["last_ts"] = _iso(window[0]), _iso(window[1])

    return ({"events": all_events, "samples": all_samples, "stacks": all_stacks, "quarantine": all_quarantine},
            manifest)


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


def check_case_target(case_dir: str | Path, bundle: str | Path | None = None) -> Path:
    """`case_dir` resolved, or CaseError when writing a case there would destroy something: the
    bundle itself or a folder above it, a file, or a folder holding anything that is not a case of
    ours. (A case inside the bundle is allowed: reading the bundle passes over it.)"""
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
    out.mkdir(parents=True, exist_ok=True)
    (out / OUTPUT_MARKER).write_text("forensics report outputs: `forensics report` rewrites the files it made\n")
    return out


@contextmanager
def case_lock(case_dir: Path) -> Iterator[None]:
    """Exclusive use of `case_dir` by one writer: a second waits until the first has swapped its
    case in (an advisory lock on a file beside the case, released when the process ends)."""
    case_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(case_dir.parent / f".{case_dir.name}.lock", "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def write_case(case_dir: str | Path, frames: dict[str, pl.DataFrame], manifest: dict[str, Any],
               bundle: str | Path | None = None) -> None:
    """The case folder: one Parquet dataset per frame and manifest.json, replaced whole. Written
    beside it first and swapped in under a lock, so a reader never sees half a case and two
    writers never mix theirs; what a killed writer left aside is removed by the next one. Refuses
    (CaseError) any place `check_case_target` refuses."""
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
                # zstd level 1: about the size of the default level, a fifth faster to write
                frames[name].write_parquet(staging / name / "part-0.parquet", compression="zstd",
                                           compression_level=1, statistics=True)
            (staging / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
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
def load_case(path: str | Path, backend: Literal["polars"] = "polars") -> Case: ...
@overload
def load_case(path: str | Path, backend: Literal["pandas"]) -> dict[str, Any]: ...


def load_case(path: str | Path, backend: str = "polars") -> Case | dict[str, Any]:
    """Open a case folder: lazy `events`, `samples`, `stacks` and `quarantine` frames plus the
    manifest. With `backend="pandas"`: a dict of those four frames as pandas DataFrames (read
    whole: for big cases, `load_case(path).to_pandas(frame, columns, where)` reads less)."""
    if backend == "pandas":
        case = load_case(path)
        return {name: case.to_pandas(name) for name in FRAMES}
    if backend != "polars":
        raise CaseError(f"backend must be polars or pandas, not {backend!r}")
    path = Path(path)
    manifest_path = path / "manifest.json"
    if not manifest_path.is_file():
        raise CaseError(f"{path}: not a case (no manifest.json); "
                        f"create one with `forensics ingest BUNDLE --case {path}`")
    manifest = json.loads(manifest_path.read_text())
    if manifest.get("version") != MANIFEST_VERSION:
        raise CaseError(f"{manifest_path}: case version {manifest.get('version')}, this forensics reads "
                        f"{MANIFEST_VERSION}; re-ingest the bundle")
    frames = {}
    for name in FRAMES:
        dataset = path / name
        if not dataset.is_dir():
            raise CaseError(f"{path}: missing the {name} dataset ({dataset})")
        frames[name] = pl.scan_parquet(dataset / "*.parquet")
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
