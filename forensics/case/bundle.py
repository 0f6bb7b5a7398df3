"""Opening a bundle: a folder as it is, or a tarball unpacked safely for the length of a run.

Kept apart from `forensics.case` so that the command line can open a bundle before importing the
data stack (a quick `--help` and quick errors).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from forensics.errors import CaseError

TARBALL_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.zst", ".tar.bz2", ".zip")
TAR_SKIPPED = ".forensics-tar-skipped.json"  # members a tarball bundle held that were not extracted


def is_tarball(path: Path) -> bool:
    """Whether `path` is a bundle packed as a tar file (plain or compressed) or a zip."""
    return path.is_file() and path.name.lower().endswith(TARBALL_SUFFIXES)


@contextmanager
def open_bundle(path: str | Path) -> Iterator[Path]:
    """A bundle folder: `path` itself, or a tarball's members unpacked into a temporary folder named
    after it for as long as the block runs. Unpacked by `forensics.case.unpack`: files and folders
    only, every name resolved under the folder; links, devices, FIFOs, names leading out and members
    past the bounds are not extracted, each listed with why among the bundle's skipped files."""
    from forensics.case.unpack import Damaged, Unpacker, unpack_file

    path = Path(path)
    if not is_tarball(path):
        yield path
        return
    name = path.name
    for suffix in TARBALL_SUFFIXES:
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
            break
    what = "the zip" if path.name.lower().endswith(".zip") else "the tarball"
    with tempfile.TemporaryDirectory(prefix="forensics-bundle-") as temporary:
        folder = Path(temporary) / (name or "bundle")
        with Unpacker(folder, what=what) as unpacker:
            try:
                unpack_file(path, unpacker)
            except OSError as error:
                raise CaseError(f"{path}: not readable ({error.strerror or error})") from None
            except Damaged as error:
                if unpacker.files == 0 and not unpacker.refused:
                    raise CaseError(f"{path}: not a readable {what[4:]} file ({error})") from None
                unpacker.stopped = f"{what[4:]} cut short or damaged: {error}"
        skipped = unpacker.listing()
        if skipped:
            (folder / TAR_SKIPPED).write_text(json.dumps(skipped))
        yield folder


