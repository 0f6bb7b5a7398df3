"""Reading input files as bytes, transparently gunzipping, unzstding or unxzing by magic number.

Uncompressed files are memory-mapped, so a 450 MB export is not copied into the heap before parsing.
Decompressed bytes go into anonymous memory mapped with MAP_POPULATE: on virtual machines a page
fault per 4 KiB on first touch costs several times the decompression itself (measured: 1.06 s to
touch 631 MB page by page, 0.18 s to populate it in one call). `pieces` hands a file over in
pieces that end at a record separator, decompressing the next piece in a thread (the codecs
release the GIL) while the caller parses the last one.
"""

from __future__ import annotations

import gzip
import lzma
import mmap
import os
import queue
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import zstandard

from forensics.errors import ParseError

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


_DAMAGED = (OSError, EOFError, lzma.LZMAError, zstandard.ZstdError, zlib.error)


class _Decompressing:
    """A decompressing reader whose failures name the file and how far it got (a copy cut short
    or damaged in transit is common evidence: the input is reported, the run goes on)."""

    def __init__(self, path: Path, kind: str) -> None:
        self.path, self.kind, self.done = path, kind, 0
        self._reader = _open_decompressed(path, kind)

    def readinto(self, view: memoryview) -> int:
        """Like a file's readinto."""
        try:
            got = self._reader.readinto(view)
        except _DAMAGED as why:
            raise ParseError(str(self.path), f"{self.kind} data damaged or cut short after {self.done:,} "
                                             f"decompressed bytes ({why})") from None
        self.done += got
        return got

    def __enter__(self) -> "_Decompressing":
        return self

    def __exit__(self, *exc: object) -> None:
        self._reader.close()


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


_POPULATE = getattr(mmap, "MAP_POPULATE", 0)
READ_BYTES = 8 << 20


def populated(size: int) -> mmap.mmap:
    """`size` bytes of zeroed anonymous memory with every page mapped in one call."""
    return mmap.mmap(-1, max(size, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _POPULATE)


class _FileMap(mmap.mmap):
    """A read-only map of a file: its pages can be dropped and are read back from the file."""


def _map_file(f) -> mmap.mmap:
    # MAP_POPULATE maps every page in one go: far fewer page faults than touching them later.
    return _FileMap(f.fileno(), 0, flags=mmap.MAP_SHARED | _POPULATE, prot=mmap.PROT_READ)


def release(data: bytes | mmap.mmap, start: int, end: int) -> None:
    """Done with `data[start:end]` (from `read_all`): let a file map's pages leave memory. Anything
    else is left alone (dropping pages of decompressed memory would zero them)."""
    if isinstance(data, _FileMap):
        aligned = start - start % mmap.PAGESIZE
        data.madvise(mmap.MADV_DONTNEED, aligned, end - aligned)


def _fill(reader, buf: mmap.mmap, start: int, end: int) -> int:
    """Read into buf[start:end] until it is full or the input ends; the new end."""
    view = memoryview(buf)
    try:
        while start < end:
            got = reader.readinto(view[start:end])
            if not got:
                break
            start += got
    finally:
        view.release()
    return start


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
            return _map_file(f)
    blocks: list[tuple[mmap.mmap, int]] = []
    with _Decompressing(path, kind) as reader:
        while True:
            block = populated(READ_BYTES)
            blocks.append((block, _fill(reader, block, 0, READ_BYTES)))
            if blocks[-1][1] < READ_BYTES:
                break
    size = sum(n for _, n in blocks)
    if size == 0:
        return b""
    whole, at = populated(size), 0
    for block, n in blocks:
        whole[at:at + n] = block[:n] if n < READ_BYTES else block
        at += n
        block.close()
    return whole


class _Buffers:
    """Populated buffers that pieces were read into, handed back for the next pieces once their
    reader is done: a whole export then passes through a few buffers instead of its size in
    fresh memory."""

    def __init__(self) -> None:
        self._free: queue.SimpleQueue[mmap.mmap] = queue.SimpleQueue()

    def take(self, size: int) -> mmap.mmap:
        """A buffer of at least `size` bytes (its bytes are whatever the last piece left)."""
        try:
            buf = self._free.get_nowait()
        except queue.Empty:
            return populated(size + size // 4)  # room for the part of the last piece carried over
        return buf if len(buf) >= size else populated(size + size // 4)

    def give(self, buf: mmap.mmap) -> None:
        """Take `buf` back, unless something still points into it (an array made from the
        piece): then it is left to be freed when that goes."""
        try:
            buf.resize(len(buf))  # refused while any buffer export of it is alive
        except BufferError:
            return
        self._free.put(buf)


@dataclass
class Piece:
    """A run of a file's (decompressed) bytes: `data[:length]`, which starts at byte `offset` of
    the file; `data` goes on for at least `slack` bytes more (the file's next bytes or filler)."""

    data: np.ndarray
    length: int
    offset: int
    at_eof: bool
    _buffer: mmap.mmap | None = None
    _owner: _Buffers | None = None

    def joined(self, after: "Piece", slack: int) -> "Piece":
        """This piece and the one after it as one piece."""
        buf = populated(self.length + after.length + slack)
        both = np.frombuffer(buf, np.uint8)
        both[:self.length] = self.data[:self.length]
        both[self.length:self.length + after.length] = after.data[:after.length]
        return Piece(both, self.length + after.length, self.offset, after.at_eof)

    @property
    def reusable(self) -> bool:
        """Whether `release` can hand this piece's memory on (decompressed pieces: yes; pieces of
        a memory-mapped file: no, their pages are the file's)."""
        return self._owner is not None

    def release(self) -> None:
        """Done with this piece: its memory may hold the next one (only if nothing made from it
        still points into it)."""
        buf, owner = self._buffer, self._owner
        self.data, self._buffer, self._owner = np.zeros(0, np.uint8), None, None
        if buf is not None and owner is not None:
            owner.give(buf)


def _plain_pieces(mapped: mmap.mmap, size: int, separator: bytes, slack: int) -> Iterator[Piece]:
    whole = np.frombuffer(mapped, np.uint8)
    total, lo = len(mapped), 0
    while lo < total:
        cut = mapped.rfind(separator, lo, min(lo + size, total))
        if cut < 0 and lo + size < total:
            cut = mapped.find(separator, lo + size - len(separator) + 1)
        hi = total if cut < 0 or cut + len(separator) >= total else cut + len(separator)
        yield Piece(whole[lo:min(hi + slack, total)], hi - lo, lo, hi >= total)
        lo = hi


def _decompressed_pieces(reader, size: int, separator: bytes, slack: int, buffers: _Buffers) -> Iterator[Piece]:
    carry, offset = b"", 0
    while True:
        buf = buffers.take(len(carry) + size + slack)
        buf[:len(carry)] = carry
        end = _fill(reader, buf, len(carry), len(carry) + size)
        if end < len(carry) + size:  # the input ended
            yield Piece(np.frombuffer(buf, np.uint8), end, offset, True, buf, buffers)
            return
        cut = buf.rfind(separator, 0, end)
        if cut < 0:  # no separator in the whole piece: read on
            carry = buf[:end]
            continue
        cut += len(separator)
        carry = buf[cut:end]
        yield Piece(np.frombuffer(buf, np.uint8), cut, offset, False, buf, buffers)
        offset += cut


def pieces(path: str | os.PathLike[str], size: int, separator: bytes, slack: int = 16) -> Iterator[Piece]:
    """The (decompressed) file in pieces of about `size` bytes, each ending just after a
    `separator` (the last at the end of the file; a piece may hold a separator that is not a
    record boundary, e.g. inside a binary value: `Piece.joined` merges it with the next).
    Compressed files are decompressed one piece ahead in a thread; `Piece.release` a piece once
    done with it, so that its memory can take a later one."""
    path = Path(path)
    with open(path, "rb") as f:
        kind = compression_of(f.read(8))
        if kind is None:
            if os.fstat(f.fileno()).st_size == 0:
                yield Piece(np.zeros(slack, np.uint8), 0, 0, True)
                return
            yield from _plain_pieces(_map_file(f), size, separator, slack)
            return
    ahead: queue.Queue = queue.Queue(maxsize=2)
    stop = threading.Event()

    def hand_over(item: Piece | BaseException | None) -> bool:
        """Queue `item` for the reader; False once the reader has gone (never blocks past that)."""
        while not stop.is_set():
            try:
                ahead.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            with _Decompressing(path, kind) as reader:
                for piece in _decompressed_pieces(reader, size, separator, slack, _Buffers()):
                    if not hand_over(piece):
                        return
        except BaseException as error:  # noqa: BLE001 - re-raised in the consumer
            hand_over(error)
            return
        hand_over(None)

    producer = threading.Thread(target=produce, name=f"decompress {path.name}", daemon=True)
    producer.start()
    try:
        while (item := ahead.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        producer.join()
