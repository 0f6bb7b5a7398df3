"""Where a case lies: a local (or shared) folder, or a prefix in an object store named by an fsspec URL.

`location` turns what a user gave (`/srv/cases/x`, `file:///srv/cases/x`, `s3://bucket/cases/x`)
into one path object the store works with: a `pathlib.Path`, or a `upath.UPath` on the URL's
fsspec file system. Kept free of the data stack so the command line can tell the two apart
before importing it. `writer_lock` keeps a second writer off a case in an object store.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union
from urllib.parse import urlsplit

from forensics.errors import CaseError

if TYPE_CHECKING:
    from upath import UPath

#: Where a case lies: a local (or shared) folder, or a prefix in an object store.
Place = Union[Path, "UPath"]


def is_url(where: str | Path) -> bool:
    """Whether `where` names an fsspec location (`s3://…`, `gs://…`, `memory://…`) rather than a
    local path (`file://` counts as local)."""
    scheme = urlsplit(str(where)).scheme if isinstance(where, str) else ""
    return "://" in str(where) and len(scheme) > 1 and scheme != "file"


def location(where: str | Path | Place) -> Place:
    """`where` as a path object: a local `Path`, or for a URL a `UPath` on its fsspec file system
    (credentials and endpoint from that system's usual settings, e.g. AWS_ENDPOINT_URL and
    AWS_ACCESS_KEY_ID for S3). Listings are never cached: other processes (Dask workers) write
    the same case."""
    if not isinstance(where, (str, Path)):
        return where
    if not is_url(where):
        text = str(where)
        return Path(text[len("file://"):] if text.startswith("file://") else text)
    try:
        from upath import UPath
    except ImportError:
        raise CaseError(f"{where}: a case in an object store needs forensics' `remote` extra "
                        "(pip install 'forensics[remote]': fsspec's S3 driver and universal-pathlib)") from None
    try:
        return UPath(str(where), use_listings_cache=False)
    except (ImportError, ValueError) as error:
        raise CaseError(f"{where}: cannot open this location ({error})") from None


def is_remote(place: Place) -> bool:
    """Whether `place` is in an object store (no renames, no file locks: see `forensics.case`)."""
    return not isinstance(place, Path)


def place_text(place: Place) -> str:
    """`place` as readers name it: a local path, or the URL."""
    return str(place)


def _holder(lock: Place) -> dict[str, Any] | None:
    """Who holds `lock` (what its writer put in it), or None when it is gone or unreadable."""
    try:
        said = json.loads(lock.read_text())
    except (OSError, ValueError):
        return None
    return said if isinstance(said, dict) else None


def _dead_here(holder: dict[str, Any]) -> bool:
    """Whether `holder` was a process of this machine that no longer runs."""
    if holder.get("host") != socket.gethostname() or not isinstance(holder.get("pid"), int):
        return False
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        pass
    return False


@contextmanager
def writer_lock(place: Place) -> Iterator[None]:
    """One writer at a time for the case at `place` in an object store: a lock object
    `.NAME.lock` beside it, written only if absent (fsspec's `mode="create"`: S3's conditional
    If-None-Match write), read back to be sure it is ours (a store that ignores the condition
    lets the last of two racers win: the other sees that and stops), and removed at the end.
    A lock whose writer was a process of this machine that is gone is taken over; one held by a
    live process, or by another machine, stops the writer with a CaseError naming it and the
    object to remove once that writer is known dead (nothing here can tell from afar)."""
    lock = place.parent / f".{place.name}.lock"
    mine = {"host": socket.gethostname(), "pid": os.getpid(),
            "since": datetime.now(timezone.utc).isoformat(timespec="seconds"), "token": os.urandom(8).hex()}
    for _ in range(3):  # a dead writer's lock taken over, or one that vanished meanwhile
        try:
            lock.fs.pipe_file(lock.path, json.dumps(mine).encode(), mode="create")
        except OSError as error:  # FileExistsError, or the store's failed precondition
            holder = _holder(lock)
            if holder is None and lock.exists():
                raise CaseError(f"{place_text(lock)}: a lock object that is not forensics' own ({error}); "
                                f"remove it if no ingest is writing {place_text(place)}") from None
            if holder is not None and not _dead_here(holder):
                raise CaseError(f"{place_text(place)}: another ingest is writing this case (host {holder.get('host')}, "
                                f"pid {holder.get('pid')}, since {holder.get('since')}); wait for it, or if it "
                                f"died, remove {place_text(lock)}") from None
            if holder is not None:
                lock.unlink(missing_ok=True)
            continue
        if _holder(lock) != mine:
            raise CaseError(f"{place_text(place)}: another ingest took this case's lock at the same moment "
                            f"({place_text(lock)}); run again once it has finished")
        break
    else:
        raise CaseError(f"{place_text(lock)}: could not take this case's lock; check the store")
    try:
        yield
    finally:
        if _holder(lock) == mine:
            lock.unlink(missing_ok=True)
