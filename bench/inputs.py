"""Generated inputs the benchmarks share, cached in bench/.cache and written again whenever the
generator's code changes: a cache made by an older generator would time and check the wrong story
(its wording, its line kinds) without saying so."""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

CACHE = Path(__file__).resolve().parent / ".cache"
GENERATOR = [Path(__file__).resolve().parent.parent / "forensics" / "lab" / name
             for name in ("reference.py", "sglang_metrics.py", "engine.py")]
STAMP = ".generator"  # in each generated bundle: what wrote it


def _stamp(**kwargs: object) -> str:
    digest = hashlib.sha256(repr(sorted(kwargs.items())).encode())
    for source in GENERATOR:
        digest.update(source.read_bytes())
    return digest.hexdigest()


def reference_bundle(folder: Path, *derived: Path, **kwargs: object) -> Path:
    """The reference incident written at `folder` with `write_reference(**kwargs)`, unless the one
    there was written by the same generator code with the same arguments; what was made from an
    older one (`derived`: its JSON, its journal, cases) is removed with it."""
    stamp = _stamp(**kwargs)
    if (folder / STAMP).is_file() and (folder / STAMP).read_text() == stamp:
        return folder
    print(f"writing the reference incident {kwargs or ''} -> {folder}", file=sys.stderr)
    for old in derived:
        if old.is_dir():
            shutil.rmtree(old)
        else:
            old.unlink(missing_ok=True)
    from forensics.lab.reference import write_reference

    write_reference(folder, **kwargs)  # type: ignore[arg-type]
    (folder / STAMP).write_text(stamp)
    return folder
