"""Reading input files as bytes, transparently gunzipping, unzstding or unxzing by magic number.

Uncompressed files are memory-mapped, so a 450 MB export is not copied into the heap before parsing.
"""

from __future__ import annotations

import gzip
import lzma
import mmap
import os
from pathlib import Path

import zstandard

_MAGIC = {
    b"\x1f\x8b": "gzip",
    b"\x28\xb5\x2f\xfd": "zstd",
    b"\xfd7zXZ\x00": "xz",
}


def compression_of(head: bytes) -> str | None:
    """The compression a file's first bytes announce, or None."""
    for magic, name in _MAGIC.items():
        if head.startswith(magic):
            return name
    return None


def _open_decompressed(path: Path, kind: str):
    if kind == "gzip":
        return gzip.open(path, "rb")
    if kind == "xz":
        return lzma.open(path, "rb")
    return zstandard.ZstdDecompressor().stream_reader(open(path, "rb"), closefd=True)


def read_head(path: str | os.PathLike[str], size: int = 4096) -> bytes:
    """Up to `size` bytes from the start of the (decompressed) file; b"" if it cannot be read."""
    path = Path(path)
    with open(path, "rb") as f:
        head = f.read(size)
    kind = compression_of(head)
    if kind is None:
        return head
    try:
        with _open_decompressed(path, kind) as f:
            return f.read(size)
    except (OSError, EOFError, lzma.LZMAError, zstandard.ZstdError):
        return b""


def read_all(path: str | os.PathLike[str]) -> bytes | mmap.mmap:
    """The whole (decompressed) file. Plain files are memory-mapped (frames built from the map
    may keep referring to it, so inputs must not be truncated while a parse runs); empty files give b""."""
    path = Path(path)
    with open(path, "rb") as f:
        head = f.read(8)
        kind = compression_of(head)
        if kind is None:
            if os.fstat(f.fileno()).st_size == 0:
                return b""
            # MAP_POPULATE maps every page in one go: far fewer page faults than touching them later.
            flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
            return mmap.mmap(f.fileno(), 0, flags=flags, prot=mmap.PROT_READ)
    with _open_decompressed(path, kind) as f:
        return f.read()
