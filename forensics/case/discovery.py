"""Which files of a bundle are inputs, in which format, and why every other one is skipped: the
bundle's own papers, links leading out of it, FIFOs and devices, a case or report folder inside
it, files no reader knows, and (with incident.toml [inputs]) files not listed.
"""

from __future__ import annotations

import fnmatch
import json
import os
from pathlib import Path

from forensics import sources
from forensics.case.bundle import TAR_SKIPPED
from forensics.errors import CaseError, WrongFormat
from forensics.case.incident import MANIFEST
from forensics.case.opened import CASE_MARKER
from forensics.case.targets import OUTPUT_MARKER

# the bundle's own papers, not evidence: the manifest, notes, what `forensics collect` recorded
IGNORED_NAMES = {MANIFEST, "README.md", ".gitkeep", ".forensics-tar-skipped.json", "collect.json",
                 "could-not-collect.tsv"}
FOLLOW_LINKS_ENV = "FORENSICS_FOLLOW_LINKS"  # 1: read symbolic links that lead out of the bundle


def follow_links_outside() -> bool:  # noqa: N802 - reads like the setting it is
    """Whether symbolic links leading out of a bundle are read (off unless FORENSICS_FOLLOW_LINKS=1)."""
    return os.environ.get(FOLLOW_LINKS_ENV, "") == "1"


def _outside(path: Path, root: Path) -> str | None:
    """Why `path` (in the bundle at `root`, resolved) is not read: a link leading out of the bundle,
    a broken link, or a file that is not a regular file (a FIFO would block the read forever)."""
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


def _utf8(name: str) -> bool:
    """Whether a file name read from the disk is valid UTF-8 (undecodable bytes arrive as surrogates)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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

    def visit(folder: Path) -> None:
        real = folder.resolve()
        if real in seen_folders:
            skip(folder, f"folder already read through another path ({real}): a symbolic link loop or alias")
            return
        seen_folders.add(real)
        for path in sorted(folder.iterdir()):
            if path.name in IGNORED_NAMES:
                continue
            if not _utf8(path.name):  # a name no output can hold as text: named with its bytes escaped
                shown = os.fsencode(path.relative_to(bundle)).decode("utf-8", "backslashreplace")
                skipped.append({"path": shown, "reason": "its name is not UTF-8: not read (rename it to read it)"})
                continue
            if (why := _outside(path, root)) is not None:
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
                links_out = any(_outside(p, root) for p in path.rglob("*") if p.is_symlink())
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

