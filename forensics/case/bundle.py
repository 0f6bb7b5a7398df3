"""Opening a bundle: a folder as it is, or a tarball unpacked safely for the length of a run.

Kept apart from `forensics.case` so that the command line can open a bundle before importing the
data stack (a quick `--help` and quick errors).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from forensics.errors import CaseError

TARBALL_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.zst", ".tar.bz2", ".zip")
TAR_SKIPPED = ".forensics-tar-skipped.json"  # members a tarball bundle held that were not extracted
# What a tarball may unpack to: a member at most, and all members together (a 2.6 KB .tar.gz can
# hold a sparse 40 GB file); set in the environment. Deeper paths than MAX_DEPTH are refused.
UNPACKED_ENV = "FORENSICS_MAX_UNPACKED"
MAX_UNPACKED = 8 << 30
MAX_DEPTH = 64


def is_tarball(path: Path) -> bool:
    """Whether `path` is a bundle packed as a tar file (plain or compressed) or a zip."""
    return path.is_file() and path.name.lower().endswith(TARBALL_SUFFIXES)


@contextmanager
def open_bundle(path: str | Path) -> Iterator[Path]:
    """A bundle folder: `path` itself, or a tarball's members unpacked into a temporary folder named
    after it for as long as the block runs. Unpacking uses tarfile's "data" filter: absolute names,
    `..`, links leading out, devices and FIFOs are not extracted; each is listed, with why, among
    the bundle's skipped files."""
    path = Path(path)
    if not is_tarball(path):
        yield path
        return
    import tarfile

    name = path.name
    for suffix in TARBALL_SUFFIXES:
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
            break
    with tempfile.TemporaryDirectory(prefix="forensics-bundle-") as temporary:
        folder = Path(temporary) / (name or "bundle")
        folder.mkdir()
        skipped: list[dict[str, str]] = []
        if path.name.lower().endswith(".zip"):
            _unzip(path, folder, skipped)
            if skipped:
                (folder / TAR_SKIPPED).write_text(json.dumps(skipped))
            yield folder
            return
        try:
            opened = tarfile.open(path) if not path.name.lower().endswith(".zst") else _zstd_tar(path)
        except (tarfile.TarError, OSError) as error:
            raise CaseError(f"{path}: not a readable tar file ({error})") from None
        budget = unpacked_limit()
        with opened as tar:
            try:
                for member in tar:
                    refused = refused_member(member, budget)
                    if refused:
                        skipped.append({"path": member.name[:300], "reason": f"not extracted from the tarball: {refused}"})
                        continue
                    try:
                        tar.extract(member, folder, filter="data")
                        budget -= member.size
                    except (tarfile.FilterError, tarfile.ExtractError, OSError, RecursionError) as why:
                        skipped.append({"path": member.name[:300],
                                        "reason": f"not extracted from the tarball: {str(why)[:300]}"})
            except (tarfile.TarError, EOFError, OSError, RecursionError) as error:
                skipped.append({"path": path.name, "reason": f"tarball cut short or damaged: {error}"})
        if skipped:
            (folder / TAR_SKIPPED).write_text(json.dumps(skipped))
        yield folder


def _unzip(path: Path, folder: Path, skipped: list[dict[str, str]]) -> None:
    """A zip bundle's members into `folder`, with the tarball's refusals: sizes past what may be
    unpacked, paths too deep, names leading out (zipfile itself drops `..` and leading slashes)."""
    import zipfile

    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as error:
        raise CaseError(f"{path}: not a readable zip file ({error})") from None
    budget = unpacked_limit()
    with archive:
        for member in archive.infolist():
            if member.is_dir():
                continue
            depth = member.filename.count("/")
            why = (f"nested {depth} folders deep (at most {MAX_DEPTH})" if depth > MAX_DEPTH else
                   f"{member.file_size:,} bytes, over what the zip may still unpack to ({budget:,} bytes of "
                   f"{UNPACKED_ENV}={unpacked_limit():,})" if member.file_size > budget else None)
            if why is None:
                try:
                    archive.extract(member, folder)
                    budget -= member.file_size
                    continue
                except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError) as error:
                    why = str(error)[:300]
            skipped.append({"path": member.filename[:300], "reason": f"not extracted from the zip: {why}"})


def unpacked_limit() -> int:
    try:
        return max(1, int(float(os.environ.get(UNPACKED_ENV, MAX_UNPACKED))))
    except ValueError:
        return MAX_UNPACKED


def refused_member(member: Any, budget: int) -> str | None:
    """Why a tarball member is not unpacked (before a byte of it is written), or None."""
    depth = member.name.count("/")
    if depth > MAX_DEPTH:
        return f"nested {depth} folders deep (at most {MAX_DEPTH})"
    if member.size > budget:
        return (f"{member.size:,} bytes{' (a sparse file)' if member.issparse() else ''}, over what the tarball "
                f"may still unpack to ({budget:,} bytes of {UNPACKED_ENV}={unpacked_limit():,})")
    return None


def _zstd_tar(path: Path) -> Any:
    import tarfile

    import zstandard

    return tarfile.open(fileobj=zstandard.ZstdDecompressor().stream_reader(open(path, "rb")), mode="r|")
