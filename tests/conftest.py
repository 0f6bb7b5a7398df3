"""Shared fixtures: real journals written by systemd's own tools."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

JOURNAL_REMOTE = Path("/lib/systemd/systemd-journal-remote")
REPO = Path(__file__).resolve().parent.parent


def export_entry(*fields: tuple[str, bytes | str]) -> bytes:
    """One entry in Journal Export Format; bytes values that need it are written in binary form."""
    out = []
    for name, value in fields:
        raw = value.encode() if isinstance(value, str) else value
        if isinstance(value, bytes):
            out.append(name.encode() + b"\n" + struct.pack("<Q", len(raw)) + raw + b"\n")
        else:
            out.append(f"{name}=".encode() + raw + b"\n")
    return b"".join(out) + b"\n"


def to_journal(export: bytes, folder: Path, name: str = "test") -> Path:
    """A real .journal file made from `export` by systemd-journal-remote."""
    source = folder / f"{name}.export"
    source.write_bytes(export)
    journal = folder / f"{name}.journal"
    journal.unlink(missing_ok=True)
    subprocess.run([str(JOURNAL_REMOTE), f"--output={journal}", str(source)], check=True, capture_output=True)
    return journal


def journalctl(journal: Path, output: str) -> bytes:
    """`journalctl --file JOURNAL -o OUTPUT` as bytes."""
    return subprocess.run(["journalctl", "--file", str(journal), "-o", output], check=True,
                          capture_output=True).stdout


@pytest.fixture(scope="session", autouse=True)
def _systemd_tools() -> None:
    missing = [str(t) for t in (JOURNAL_REMOTE,) if not t.exists()]
    missing += [t for t in ("journalctl",) if shutil.which(t) is None]
    if missing:
        pytest.exit(f"missing systemd tools {missing}: run the tests through ./run test, which installs them", 2)


def write_file(folder: Path, name: str, text: str) -> Path:
    """Write `text` to `folder/name` and return the path."""
    path = folder / name
    path.write_text(text)
    return path
