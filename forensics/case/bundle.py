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
from typing import Any

from forensics.errors import CaseError

TARBALL_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.zst", ".tar.bz2")
TAR_SKIPPED = ".forensics-tar-skipped.json"  # members a tarball bundle held that were not extracted


def is_tarball(path: Path) -> bool:
    """Whether `path` is a bundle packed as a tar file (plain or compressed)."""
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
        skipped = []
        try:
            opened = tarfile.open(path) if not path.name.lower().endswith(".zst") else _zstd_tar(path)
        except (tarfile.TarError, OSError) as error:
            raise CaseError(f"{path}: not a readable tar file ({error})") from None
        with opened as tar:
            try:
                for member in tar:
                    try:
                        tar.extract(member, folder, filter="data")
                    except (tarfile.FilterError, tarfile.ExtractError, OSError) as why:
                        skipped.append({"path": member.name, "reason": f"not extracted from the tarball: {why}"})
            except (tarfile.TarError, EOFError, OSError) as error:
                skipped.append({"path": path.name, "reason": f"tarball cut short or damaged: {error}"})
        if skipped:
            (folder / TAR_SKIPPED).write_text(json.dumps(skipped))
        yield folder


def _zstd_tar(path: Path) -> Any:
    import tarfile

    import zstandard

    return tarfile.open(fileobj=zstandard.ZstdDecompressor().stream_reader(open(path, "rb")), mode="r|")
