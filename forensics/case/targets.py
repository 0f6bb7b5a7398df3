"""Where a case or a report may be written: a case folder carries `.forensics-case` and a report
folder `.forensics-report`, and no other folder is ever replaced — nor the bundle, a folder above it
or one inside it; in an object store, a case needs a prefix of its own that holds nothing else.
Also the lock that keeps a second writer of a case folder waiting (`case_lock`).
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from forensics.errors import CaseError
from forensics.case.opened import CASE_MARKER, FRAMES
from forensics.case.places import Place, is_remote, location, place_text

OUTPUT_MARKER = ".forensics-report"  # in every report folder: the only folders a report writes into


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


def stored_objects(place: Place) -> list[str]:
    """The objects under `place` in its object store, by full key (not the empty "folders" some
    stores keep, such as SeaweedFS's filer)."""
    found = place.fs.find(place.path, withdirs=False, detail=True)
    return sorted(name for name, info in found.items() if info.get("type") == "file")


def check_remote_target(case: Place, given: str | Place) -> Place:
    """`case` (in an object store), or CaseError when a case may not be written there: a bucket's
    root, an object of that name, or a prefix holding objects that are not a case of ours."""
    if not case.path.strip("/").count("/"):
        raise CaseError(f"{given}: a case needs a prefix of its own inside the bucket "
                        f"(e.g. {place_text(case).rstrip('/')}/cases/NAME), not the bucket itself")
    try:
        if case.is_file():
            raise CaseError(f"{given}: an object of that name exists; refusing to replace it with a case")
        held = stored_objects(case)
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
    checked in its object store the same way (`check_remote_target`)."""
    if is_remote(place := location(case_dir)):
        return check_remote_target(place, case_dir)
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
