"""A case built aside and swapped in whole, so a reader never sees half a case and two writers
never mix theirs. In a folder: built beside it and renamed in place under `case_lock`; what a killed
writer left aside is removed by the next one.

A case may lie in an object store instead (`--case s3://bucket/cases/NAME`, any fsspec URL): it is
built on local disk (or by Dask workers beside its place, `.NAME.partial-*`), then put in with its
manifest last. The manifest is what makes a case there — the old one's goes first — so a reader
never takes half a case for a whole one, and a build that fails leaves the old case as it was. A
second writer of the same URL is stopped by a lock object beside the case
(`forensics.case.places.writer_lock`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from forensics.case import cluster
from forensics.case.cluster import Progress
from forensics.case.opened import CASE_MARKER, FRAMES
from forensics.case.places import Place, is_remote, location, place_text, writer_lock
from forensics.case.targets import case_lock, check_case_target, check_remote_target, stored_objects

# s3fs reads a file under 100 MiB whole before sending it: a few at a time keep memory bounded
UPLOADS_AT_ONCE = 4


def _remove_tree(place: Place) -> None:
    """Every object under `place` in its object store (nothing if there are none)."""
    if objects := stored_objects(place):
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
            built = [name for name in stored_objects(staging) if not name.endswith("/manifest.json")]
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
        check_remote_target(place, case_dir)
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


