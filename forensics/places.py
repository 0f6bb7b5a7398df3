"""Where a case lies: a local (or shared) folder, or a prefix in an object store named by an fsspec URL.

`location` turns what a user gave (`/srv/cases/x`, `file:///srv/cases/x`, `s3://bucket/cases/x`)
into one path object the store works with: a `pathlib.Path`, or a `upath.UPath` on the URL's
fsspec file system. Kept free of the data stack so the command line can tell the two apart
before importing it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Union
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
    """Whether `place` is in an object store (no renames, no locks: see `forensics.case`)."""
    return not isinstance(place, Path)


def place_text(place: Place) -> str:
    """`place` as readers name it: a local path, or the URL."""
    return str(place)
