"""The case store: an incident bundle ingested once into Parquet, reopened lazily in well under a second.

Layout of a case folder (one Parquet dataset per canonical frame, named after it; the three
frames of evidence partitioned by host, Hive style: see `forensics.case.store`)::

    CASE/events/host=H/part-0.parquet   one row per journal record (see `forensics.sources.common.schema.EVENTS_SCHEMA`)
    CASE/samples/host=H/part-0.parquet  one row per metric sample (`forensics.sources.common.schema.SAMPLES_SCHEMA`)
    CASE/stacks/host=H/part-0.parquet   one row per py-spy stack frame (`forensics.sources.common.schema.STACKS_SCHEMA`)
    CASE/quarantine/part-*.parquet      every record that could not be read, with file, place and reason
    CASE/manifest.json                  inputs with sha256, format, records, quarantined, time span;
                                        the partitions of each frame

Ingest streams: each input is read in pieces (a journal export ~16 MB at a time) and every
PART_ROWS records either held in memory (in this process, up to HOLD_BYTES over all inputs:
`Held`; a host folder of held rows is written once, as its one file) or written to their hosts'
folders as one part, so memory holds a part, not the bundle; the inputs, then the host folders,
are tasks that run in this process or on a Dask cluster (`forensics.case.cluster`).
Re-ingesting a bundle rewrites the case whole (written aside, then swapped in under a lock:
`forensics.case.staging`, where a case may lie in an object store too), so running it twice gives
the same case; where a case may be written at all is `forensics.case.targets`, which inputs of a
bundle are read `forensics.case.discovery`, and a case is opened by `forensics.case.opened`.

Records seen in the same journal through two inputs (overlapping exports: the same `__CURSOR`)
are kept once and counted as duplicates of the later input.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

import polars as pl

from forensics import sources
from forensics.errors import CaseError, ForensicsError, ParseError
from forensics.case.incident import load_incident
from forensics.case import cluster
from forensics.case.cluster import Progress, Runner
from forensics.sources.common import mapguard
from forensics.sources.common.schema import EXCERPT_CHARS, QUARANTINE_SCHEMA, SCHEMAS, empty, validate
from forensics.case.discovery import discover
from forensics.case.opened import MANIFEST_VERSION, load_case
from forensics.case.places import Place, location, place_text
from forensics.case.staging import staged_case
from forensics.case.store import (PARTITION, PARTS, by_host, columns_of, finish_held, finish_partition, hosts_in,
                                  partition_name, write_empty, write_host_part, write_part)
from forensics.case.targets import check_case_target


def _size(path: Path) -> int:
    """Bytes of an input: a file's, or every file's in a folder read whole (0 for one gone since it
    was found: its reading says so)."""
    try:
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else path.stat().st_size
    except OSError:
        return 0


def _sha256(path: Path) -> str:
    """The SHA-256 of an input's bytes (a folder's files in name order, end to end)."""
    digest = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    # one buffer read into again and again: a new 1 MiB block per read cost a page fault per 4 KiB
    block = bytearray(1 << 20)
    view = memoryview(block)
    for file in files:
        with open(file, "rb", buffering=0) as f:
            while size := f.readinto(block):
                digest.update(view[:size])
    return digest.hexdigest()


class _Hashing(threading.Thread):
    """An input's `_sha256`, taken in a thread of its own while the input is read (hashlib lets
    go of the GIL over large blocks): hashed first, a 40 MB journal held back its reading by
    about 50 ms, the longest input's on every run."""

    def __init__(self, path: Path) -> None:
        super().__init__(name="forensics-sha256", daemon=True)
        self.path = path
        self.digest: str | None = None
        self.error: OSError | None = None
        self.start()

    def run(self) -> None:
        try:
            self.digest = _sha256(self.path)
        except OSError as error:  # said by the input's own read, or in its notes when only the hash failed
            self.error = error

    def result(self) -> str | None:
        """The digest, or None when the file could not be hashed (`error` says why)."""
        self.join()
        return self.digest


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


MAX_HOSTS = 4096  # hosts one journal input may name: past that the host fields are forged or damaged
MAX_PARTITION_NAME = 255  # bytes in a folder name (ext4, xfs, btrfs)
# Rows of one input held before they are written as a part: few files, and memory bounded however
# big the input (~150 MB of journal rows of a few hundred bytes) — and however big its rows: a part
# is written once its rows hold PART_BYTES too (an export of 2,000 entries of 1 MiB each, none
# written before the 250,000th row, peaked at 7.5 GB)
PART_ROWS = 250_000
PART_BYTES = 256 << 20


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


def _no_rows(entry: dict[str, Any]) -> dict[str, Any]:
    """What `ingest_input` says of an input before any of its rows are read (or when it failed):
    per frame its rows went to (`frames`: a py-spy file's dumps and the log lines between them go
    to two), their hosts, extra columns and count."""
    return {"entry": entry, "frames": {}, "dumps": 0, "first": None, "last": None}


def _frame_facts(facts: dict[str, Any], name: str) -> dict[str, Any]:
    """What an input's rows of frame `name` hold so far (hosts, extra columns, rows)."""
    return facts["frames"].setdefault(name, {"hosts": set(), "extras": set(), "rows": 0})


def frame_facts(read: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """Each input's facts of frame `name`, of the inputs that read rows into it."""
    return [f["frames"][name] for f in read if name in f["frames"]]


def ingest_input(bundle: str, relative: str, source_name: str, staging: str, index: int,
                 held: Held | None = None) -> dict[str, Any]:
    """Read one input of `bundle` (at `relative` in it) part by part into the case being built at
    `staging` (or into `held`, while it has room): the input's manifest entry, and what the case
    needs to know of its rows (frame, hosts, extra columns, rows, py-spy dumps, first and last
    time). The unit of work that runs in this process or on a Dask worker; run twice, it writes
    the same files."""
    folder, path, source = location(staging), Path(bundle) / relative, sources.get(source_name)
    hashing = _Hashing(path)
    entry: dict[str, Any] = {"path": relative, "format": source.name, "sha256": None}
    facts = _no_rows(entry)
    seen_hosts: set[str | None] = set()
    records, parsed, quarantined, damage, notes = 0, 0, 0, None, []
    waiting: list[pl.DataFrame] = []  # parts read, written together once PART_ROWS or PART_BYTES are waiting
    waiting_frame = [""]  # the frame of the rows waiting (one input's parts may go to two)
    refusals: list[pl.DataFrame] = []
    written = waiting_rows = waiting_bytes = 0

    def write() -> None:
        nonlocal written, waiting_rows, waiting_bytes
        if waiting:
            name = waiting_frame[0]
            rows = pl.concat(waiting, how="diagonal_relaxed") if len(waiting) > 1 else waiting[0]
            tag = f"{index:06d}-{written:06d}"
            if held is not None and held.keep(index, name, tag, rows):
                _frame_facts(facts, name)["hosts"].update(hosts_in(rows))
            else:
                for held_name, held_tag, held_rows in held.spill(index) if held is not None else []:
                    write_part(folder, held_name, held_rows, held_tag)
                _frame_facts(facts, name)["hosts"].update(write_part(folder, name, rows, tag))
        if refusals:
            write_part(folder, "quarantine", pl.concat(refusals), f"{index:06d}-{written:06d}")
        waiting.clear()
        refusals.clear()
        written, waiting_rows, waiting_bytes = written + 1, 0, 0

    _remove_parts(folder, index)  # what an attempt on a worker that died left
    try:
        for part in sources.read_in_parts(source, path):
            part.check_accounting(path)
            if waiting and part.frame != waiting_frame[0]:
                write()  # the rows waiting are of another frame: theirs written first
            name = waiting_frame[0] = part.frame
            rows = part.rows.with_columns(pl.lit(relative).cast(SCHEMAS[name]["source_file"]).alias("source_file"))
            refused = empty(QUARANTINE_SCHEMA)
            if rows.height:
                rows, refused = _refuse_hosts(rows, name, seen_hosts, relative, source.name)
            validate(rows, SCHEMAS[name], name, extra=pl.String if name == "events" else None)
            _frame_facts(facts, name)["extras"].update(set(rows.columns) - set(SCHEMAS[name]))
            records += part.records
            parsed += part.parsed - refused.height
            quarantined += part.quarantine.height + refused.height
            _frame_facts(facts, name)["rows"] += rows.height
            if name == "stacks":
                facts["dumps"] += rows.select("dump").n_unique()
            if rows.height:
                first, last = rows.select(pl.col("ts").min().alias("first"), pl.col("ts").max().alias("last")).row(0)
                facts["first"] = min(filter(None, (facts["first"], first)), default=None)
                facts["last"] = max(filter(None, (facts["last"], last)), default=None)
                waiting.append(rows)
                waiting_rows, waiting_bytes = waiting_rows + rows.height, waiting_bytes + rows.estimated_size()
            refusals += [q for q in (part.quarantine.with_columns(pl.lit(relative).alias("source_file")), refused)
                         if q.height]
            # each file of a folder read apart may have its own damage: every one is said
            damage = "; ".join(filter(None, (damage, part.damage))) or None
            notes = notes + part.notes
            if waiting_rows >= PART_ROWS or waiting_bytes >= PART_BYTES:
                write()
        write()
        _check_unshrunk(path, Path(bundle))
    except Exception as error:  # noqa: BLE001 - one input's reader failing is that input's error, never the run's
        error = _shrink_error(path, Path(bundle)) or error
        _remove_parts(folder, index)
        if held is not None:
            held.spill(index)
        entry.update(sha256=hashing.result(), records=0, parsed=0, quarantined=0, error=_failure(error, source.name))
        return _no_rows(entry)
    entry.update(records=records, parsed=parsed, quarantined=quarantined)
    _finish_entry(entry, hashing, damage, notes)
    return facts


def _finish_entry(entry: dict[str, Any], hashing: _Hashing, damage: str | None, notes: list[str]) -> None:
    """An input read: its hash, damage and notes in its manifest entry (a hash that could not be
    taken, the file gone or unreadable after it was read, is a note)."""
    entry["sha256"] = hashing.result()
    if hashing.error is not None:
        notes = [*notes, f"its SHA-256 could not be taken: {hashing.error}"]
    if damage:
        entry["error"] = damage
    if notes:
        entry["notes"] = notes


def _shrink_error(path: Path, bundle: Path) -> ParseError | None:
    """The input's error when a file of it shrank while it was mapped (`mapguard`), else None; it
    stands before any other error of the reading, which met zeros past the file's new end."""
    shrunk = mapguard.shrunk_under(path)
    return None if shrunk is None else ParseError(
        _shown(shrunk.path, bundle), f"{shrunk.said()}; none of its records are kept (read it again once nothing "
                                     "writes to it)")


def _shown(path: str, bundle: Path) -> str:
    """`path` (real) as the bundle names it, where it lies in the bundle."""
    root = os.path.realpath(bundle)
    return os.path.relpath(path, root) if path.startswith(root.rstrip(os.sep) + os.sep) else path


def _check_unshrunk(path: Path, bundle: Path) -> None:
    """Raise `_shrink_error` if a file of the input shrank while it was mapped."""
    if (shrunk := _shrink_error(path, bundle)) is not None:
        raise shrunk


def check_held_unshrunk(bundle: Path, when: str, consequence: str) -> None:
    """A CaseError if a file of `bundle` shrank `when` (with its `consequence`): rows held in memory
    point into their files' maps (in this process; with Dask nothing is held, and each worker's
    `ingest_input` said its own inputs' shrinking)."""
    if (shrunk := mapguard.shrunk_under(bundle)) is not None:
        raise CaseError(f"{_shown(shrunk.path, bundle)}: {shrunk.said(when)}; {consequence} (ingest again once "
                        "nothing writes to the bundle)")


def _failure(error: Exception, reader: str) -> str:
    """What an input's entry says of the error that ended its reading: a ForensicsError's own
    words, the system's for a file it could not read; anything else is a reader's fault met on this
    input, named with its type."""
    if isinstance(error, ForensicsError):
        return str(error)
    if isinstance(error, OSError):  # the system's, not the reader's: gone since it was found, unreadable
        return f"it could not be read: {error}"
    said = str(error).strip().splitlines()
    return (f"the {reader} reader failed on this input ({type(error).__name__}: {said[0][:300] if said else ''}); "
            "none of its records are in the case — a fault of forensics: please report it with the file")


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
    mapguard.forget_under(bundle)  # what an earlier reading of this bundle met is not this one's
    if held is not None and sum(_size(path) for path, _ in found) > HOLD_INPUT_BYTES:
        held.limit = 0
    root = bundle.absolute()
    run.check_paths([root, staging])
    calls = [(str(root), str(path.relative_to(bundle)), source.name, place_text(staging), index)
             + ((held,) if held is not None else ())
             for index, (path, source) in enumerate(found)]
    read = run.map(ingest_input, calls, "inputs", progress)
    extras = sorted(set().union(*(f["extras"] for f in frame_facts(read, "events"))))
    partitions = {name: sorted({h for f in frame_facts(read, name) for h in f["hosts"]}, key=lambda h: (h is None, h))
                  for name in SCHEMAS}
    duplicates: dict[str, int] = {}
    if held is not None:
        held_parts = held.by_partition()
        held.inputs.clear()  # from here on each host's rows are held by its finishing call alone
        if sum(f["rows"] for f in frame_facts(read, "events")) > held.keep_events:
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
    check_held_unshrunk(bundle, "after it was read, before its records were written",
                        "the case would hold zeros for them, so none is written")
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
    rows = {name: sum(f["rows"] for f in frame_facts(read, name)) for name in SCHEMAS}
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

