"""Reading input files as bytes, transparently gunzipping, unzstding or unxzing by magic number.

Uncompressed files are memory-mapped, so a 450 MB export is not copied into the heap before parsing.
Decompressed bytes go into anonymous memory mapped with MAP_POPULATE: on virtual machines a page
fault per 4 KiB on first touch costs several times the decompression itself (measured: 1.06 s to
touch 631 MB page by page, 0.18 s to populate it in one call). `pieces` hands a file over in
pieces that end at a record separator, decompressing the next piece in a thread (the codecs
release the GIL) while the caller parses the last one.
"""

from __future__ import annotations

import lzma
import mmap
import os
import queue
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import zstandard

from forensics.errors import ParseError
from forensics.sources.common import mapguard

# Bounds on what one input may expand to when read whole (a gzip of 18 MB can hold 4 GiB of
# newlines): the smaller of this ratio to its compressed size and this many bytes. Set either in the
# environment; past them the input keeps what came before, and its damage says why.
EXPANSION_ENV, DECOMPRESSED_ENV = "FORENSICS_MAX_EXPANSION", "FORENSICS_MAX_DECOMPRESSED"
MAX_EXPANSION = 100
MAX_DECOMPRESSED = 2 << 30
# The most lines a line reader takes from one input read whole: a parser holds some tens of bytes per
# line, so 4 GiB of empty lines would take hundreds of GB; past it the input keeps what came before.
MAX_LINES_ENV = "FORENSICS_MAX_LINES"
MAX_LINES = 20_000_000
# The longest line a line reader reads (`cut_long_lines`); a longer one is quarantined, not read.
MAX_LINE_ENV = "FORENSICS_MAX_LINE"
MAX_LINE = 1 << 20
# The longest run without a record separator a piece reader holds (a journal export's entry between
# blank lines): journald stores a field of at most 768 MiB, so no entry it wrote is longer. A small
# zstd file can hold gigabytes with no separator, which would otherwise be held whole (and scanned
# by nothing: a piece is at most 2 GiB); past the bound the input ends there, its damage says why.
MAX_RECORD_ENV = "FORENSICS_MAX_RECORD"
MAX_RECORD = 1 << 30


def _setting(name: str, default: int) -> int:
    try:
        return max(1, int(float(os.environ.get(name, default))))
    except ValueError:
        return default


def decompression_limit(compressed_size: int) -> int:
    """How many decompressed bytes an input of `compressed_size` bytes may give when read whole."""
    return min(_setting(EXPANSION_ENV, MAX_EXPANSION) * max(compressed_size, 1 << 20),
               _setting(DECOMPRESSED_ENV, MAX_DECOMPRESSED))

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


_DAMAGED = (OSError, EOFError, lzma.LZMAError, zstandard.ZstdError, zlib.error)
# Compressed bytes fed to the codec per call: when a stream is damaged, what that one call would
# have decoded is all that is lost; everything before it has been handed on already. The feed also
# bounds what one call holds: at the format's largest ratio (measured on a run of one byte: gzip
# 1,030:1, xz 6,900:1, zstd 32,400:1 by its one-byte blocks) each gives at most about 33 MiB. 16 KiB
# of zstd gave 532 MB in one call; 1 KiB costs 20 ms more over the 654 MB reference export.
_STEP = {"gzip": 1 << 14, "xz": 1 << 10, "zstd": 1 << 10}


def _decoder(kind: str) -> Any:
    """A fresh decoder for one gzip member, xz stream or zstd frame."""
    if kind == "gzip":
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if kind == "xz":
        return lzma.LZMADecompressor()
    return zstandard.ZstdDecompressor().decompressobj()


class _Decompressing:
    """A decompressing reader that hands on every byte it could decode before a break, then ends
    (a short read, then 0) and says in `damage` why and after how many bytes: a copy cut short or
    damaged in transit is common evidence, and what came before the break is good evidence. Reads
    concatenated members and frames (`cat a.gz b.gz`); a stream that ends without its end marker
    is reported as cut short (gzip, xz and zstd alike)."""

    def __init__(self, path: Path, kind: str, limit: int | None = None) -> None:
        self.path, self.kind, self.done = path, kind, 0
        self.limit = limit  # decompressed bytes it hands on at most (None: no bound)
        self.damage: str | None = None
        self._file = open(path, "rb")
        self._current: Any = None  # the decoder of the member or frame being read
        self._carry = b""  # input that followed the end of the last member
        self._pending = memoryview(b"")
        self._ended = False

    def _decoded(self) -> bytes:
        """The next decoded bytes; b"" at the end of the input. Raises what the codec raises."""
        while True:
            data, self._carry = (self._carry or self._file.read(_STEP[self.kind])), b""
            if not data:
                if self._current is not None and not self._current.eof:
                    raise EOFError("the input ends inside a compressed stream")
                return b""
            if self._current is None or self._current.eof:
                if self._current is not None and not data.strip(b"\0"):
                    continue  # zero padding after the last member (tape and block devices add it)
                self._current = _decoder(self.kind)
            out = self._current.decompress(data)
            if self._current.eof:
                self._carry = self._current.unused_data
            if out:
                return out

    def readinto(self, view: memoryview) -> int:
        """Like a file's readinto; after a break, the bytes before it, then 0."""
        filled = 0
        if self.limit is not None and self.done + len(view) > self.limit:
            view = view[:max(0, self.limit - self.done)]
            if not len(view) and not self._ended:
                self._ended = True
                self.damage = (f"decompression limit reached after {self.done:,} bytes ({EXPANSION_ENV}="
                               f"{_setting(EXPANSION_ENV, MAX_EXPANSION)} times the compressed size, at most "
                               f"{DECOMPRESSED_ENV}={_setting(DECOMPRESSED_ENV, MAX_DECOMPRESSED):,} bytes); "
                               "the bytes before it were read")
        while filled < len(view) and not self._ended:
            if not self._pending:
                try:
                    chunk = self._decoded()
                except _DAMAGED as why:
                    self._ended = True
                    self.damage = (f"{self.kind} data damaged or cut short after {self.done + filled:,} "
                                   f"decompressed bytes ({why or type(why).__name__}); the bytes before it were read")
                    break
                if not chunk:
                    self._ended = True
                    break
                self._pending = memoryview(chunk)
            take = min(len(self._pending), len(view) - filled)
            view[filled:filled + take] = self._pending[:take]
            self._pending = self._pending[take:]
            filled += take
        self.done += filled
        return filled

    def raise_damage(self) -> None:
        """ParseError naming the file and how far it got, if the input broke off."""
        if self.damage is not None:
            raise ParseError(str(self.path), self.damage)

    def __enter__(self) -> "_Decompressing":
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()


def read_head(path: str | os.PathLike[str], size: int = 4096) -> bytes:
    """Up to `size` bytes from the start of the (decompressed) file (b"" if none can be decoded)."""
    path = Path(path)
    with open(path, "rb") as f:
        head = f.read(size)
    kind = compression_of(head)
    if kind is None:
        return head
    buf = bytearray(size)
    with _Decompressing(path, kind) as reader:  # a copy cut short still shows what it starts with
        got = _fill(reader, memoryview(buf), 0, size)
    return bytes(buf[:got])


_POPULATE = getattr(mmap, "MAP_POPULATE", 0)
READ_BYTES = 8 << 20
FIRST_BLOCK = 1 << 16  # the least a compressed file's first block holds


def populated(size: int) -> mmap.mmap:
    """`size` bytes of zeroed anonymous memory with every page mapped in one call."""
    return mmap.mmap(-1, max(size, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _POPULATE)


class _FileMap(mapguard.GuardedMap):
    """A read-only map of a file: its pages can be dropped and are read back from the file."""


def _map_file(f) -> mmap.mmap:
    """A guarded map of the open file `f` (`mapguard`: a page gone from the file reads as zeros,
    and the file is noted, instead of SIGBUS ending the process)."""
    # MAP_POPULATE maps every page in one go: far fewer page faults than touching them later.
    data = _FileMap(f.fileno(), 0, flags=mmap.MAP_SHARED | _POPULATE, prot=mmap.PROT_READ)
    data.guard(f.name)
    return data


def release(data: bytes | mmap.mmap, start: int, end: int) -> None:
    """Done with `data[start:end]` (from `read_all`): let a file map's pages leave memory. Anything
    else is left alone (dropping pages of decompressed memory would zero them)."""
    if isinstance(data, _FileMap):
        aligned = start - start % mmap.PAGESIZE
        data.madvise(mmap.MADV_DONTNEED, aligned, end - aligned)


def _resized(buf: mmap.mmap, size: int) -> mmap.mmap:
    """`buf` made `size` bytes long in place, or, while a view of it is still held elsewhere (a
    sampling profiler's frame: Dask's samples every worker thread's stack, and a frame it holds
    keeps the view `_fill` handed to `readinto`), a new populated buffer with its bytes: a resize is
    refused while any export of the buffer lives, and that must not fail the input."""
    try:
        buf.resize(size)
        return buf
    except BufferError:
        grown = populated(size)
        kept = min(size, len(buf))
        grown[:kept] = buf[:kept]
        return grown


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
    """The whole (decompressed) file; ParseError naming the file if a compressed copy breaks off
    (for formats where half a document is no document, e.g. one JSON value)."""
    data, damage = read_whole(path)
    if damage is not None:
        raise ParseError(str(path), damage)
    return data


def read_whole(path: str | os.PathLike[str]) -> tuple[bytes | mmap.mmap, str | None]:
    """The whole (decompressed) file, and why it broke off if a compressed copy is damaged or cut
    short (None when whole): the bytes before the break are returned either way. Plain files are
    memory-mapped (frames built from the map may keep referring to it; a file that shrinks under
    it reads as zeros past its new end, and `mapguard.shrunk_under` tells); empty files give b""."""
    path = Path(path)
    with open(path, "rb") as f:
        head = f.read(8)
        kind = compression_of(head)
        if kind is None:
            if os.fstat(f.fileno()).st_size == 0:
                return b"", None
            return _map_file(f), None
    blocks: list[tuple[mmap.mmap, int]] = []
    compressed = path.stat().st_size
    # The first block as large as the file likely decompresses to (text compresses 10-40 times),
    # so that a small file is read into one block and kept as it is: a block of READ_BYTES for a
    # 3 MB scrape file and a copy into a second cost 8% of reading it.
    block_size = min(READ_BYTES, max(FIRST_BLOCK, -(-64 * compressed // mmap.PAGESIZE) * mmap.PAGESIZE))
    with _Decompressing(path, kind, decompression_limit(compressed)) as reader:
        while True:
            block = populated(block_size)
            blocks.append((block, _fill(reader, block, 0, block_size)))
            if blocks[-1][1] < block_size:
                break
            block_size = READ_BYTES
    size = sum(n for _, n in blocks)
    if size == 0:
        return b"", reader.damage
    if len(blocks) == 1:  # the pages past its end given back, the rest kept in place
        return _resized(blocks[0][0], size), reader.damage
    whole, at = populated(size), 0
    for block, n in blocks:
        whole[at:at + n] = block[:n] if n < len(block) else block
        at += n
        try:
            block.close()
        except BufferError:  # a view of it still held elsewhere (a sampling profiler's frame, on Dask): GC frees it
            pass
    return whole, reader.damage


def read_whole_lines(path: str | os.PathLike[str]) -> tuple[bytes | mmap.mmap, str | None]:
    """`read_whole` for line formats: when a compressed copy breaks off, what follows its last
    complete line is left out (a sample value cut from `123.4` to `12` must not be read) and the
    damage says so."""
    data, damage = read_whole(path)
    data, lines_damage = _at_most_lines(data, _setting(MAX_LINES_ENV, MAX_LINES))
    if lines_damage:
        return data, "; ".join(d for d in (damage, lines_damage) if d)
    if damage is None:
        return data, None
    cut = bytes(data).rfind(b"\n") + 1
    if cut < len(data):
        damage += f"; the {len(data) - cut:,} bytes after the last complete line were left out"
        data = bytes(data[:cut])
    return data, damage


def _at_most_lines(data: bytes | mmap.mmap, most: int) -> tuple[bytes | mmap.mmap, str | None]:
    """`data` up to the end of its `most`-th line (counted 64 MiB at a time), and why when cut."""
    if len(data) <= most:
        return data, None
    view = np.frombuffer(data, dtype=np.uint8)
    seen, window = 0, 64 << 20
    for at in range(0, len(view), window):
        here = _count_newlines(data, at, min(at + window, len(view)))
        if seen + here >= most:
            ends = np.flatnonzero(view[at:at + window] == 10)
            cut = at + int(ends[most - seen - 1]) + 1
            if cut >= len(view):
                return data, None
            return bytes(view[:cut]), (f"line limit reached after {most:,} lines ({MAX_LINES_ENV}); the "
                                       f"{len(view) - cut:,} bytes after them were left out")
        seen += here
    return data, None


def cut_long_lines(data: bytes | mmap.mmap, max_line: int | None = None
                   ) -> tuple[bytes | mmap.mmap, list[tuple[int, int]]]:
    """`data` with every line longer than `max_line` bytes (default `MAX_LINE`, or FORENSICS_MAX_LINE)
    left empty, and those lines as (line number, length): one 2 GB line must not become a 2 GB
    string, nor a Parquet page over its 2 GiB limit. The common case (no such line) costs a search
    for one newline in each stretch of half the limit, not a pass over every byte."""
    limit = max_line or _setting(MAX_LINE_ENV, MAX_LINE)
    if len(data) <= limit:
        return data, []
    long = _long_lines(data, limit) if limit >= 2 * SEARCHED_STRETCH else _long_lines_counted(data, limit)
    if not long:
        return data, []
    parts, at = [], 0
    for _, begin, end in long:
        parts += [bytes(data[at:begin])]
        at = end
    parts.append(bytes(data[at:]))
    return b"".join(parts), [(line, end - begin) for line, begin, end in long]


# A line longer than the limit holds a whole aligned stretch of half the limit without a newline;
# below this stretch the newlines are counted instead (a search per stretch would cost more).
SEARCHED_STRETCH = 64 << 10


def _long_lines(data: bytes | mmap.mmap, limit: int) -> list[tuple[int, int, int]]:
    """(line number, start, end) of the lines of `data` longer than `limit`: the stretches of half
    the limit holding no newline are found by one search each; only around those is a line's length
    measured, and the newlines before it counted for its number."""
    stretch, long, counted_to, lines_before = limit // 2, [], 0, 0
    at = 0
    while at < len(data):
        if data.find(b"\n", at, at + stretch) >= 0:
            at += stretch
            continue
        begin = data.rfind(b"\n", 0, at) + 1
        end = data.find(b"\n", at)
        end = len(data) if end < 0 else end
        if end - begin > limit:
            lines_before += _count_newlines(data, counted_to, begin)
            counted_to = begin
            long.append((lines_before + 1, begin, end))
        at = (end // stretch + 1) * stretch  # the next aligned stretch past this line's end
    return long


def _count_newlines(data: bytes | mmap.mmap, start: int, end: int) -> int:
    """Newlines in data[start:end], counted 64 MiB at a time (no temporary the size of the data)."""
    view = np.frombuffer(data, dtype=np.uint8)
    return sum(int(np.count_nonzero(view[at:min(at + (64 << 20), end)] == 10)) for at in range(start, end, 64 << 20))


def _long_lines_counted(data: bytes | mmap.mmap, limit: int) -> list[tuple[int, int, int]]:
    """`_long_lines` for a small limit: every newline found, 64 MiB at a time."""
    view = np.frombuffer(data, dtype=np.uint8)
    long, lines_before, start = [], 0, 0  # start: where the current line began
    window = 64 << 20
    for at in range(0, len(view), window):
        ends = np.flatnonzero(view[at:at + window] == 10) + at
        bounds = np.concatenate(([start], ends + 1))
        lengths = ends - bounds[:-1]
        for index in np.flatnonzero(lengths > limit):
            long.append((lines_before + int(index) + 1, int(bounds[index]), int(ends[index])))
        lines_before += len(ends)
        start = int(bounds[-1])
    if len(view) - start > limit:
        long.append((lines_before + 1, start, len(view)))
    return long


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


def _record_too_long(source: str, start: int, longest: int, separator: bytes) -> ParseError:
    """The damage of an input that goes on past `longest` bytes from byte `start` without `separator`."""
    boundary = {b"\n\n": "a blank line", b"\n": "a newline"}.get(separator, repr(separator))
    return ParseError(source, f"no record boundary ({boundary}) in the {longest:,} bytes from byte {start:,}: a "
                              f"record longer than the longest one may be ({MAX_RECORD_ENV}); the input was not "
                              "read from there, the records before it were")


def _plain_pieces(mapped: mmap.mmap, size: int, separator: bytes, slack: int, source: str) -> Iterator[Piece]:
    whole = np.frombuffer(mapped, np.uint8)
    total, lo, longest = len(mapped), 0, _setting(MAX_RECORD_ENV, MAX_RECORD)
    while lo < total:
        cut = mapped.rfind(separator, lo, min(lo + size, total))
        if cut < 0 and lo + size < total:
            cut = mapped.find(separator, lo + size - len(separator) + 1, lo + size + longest)
            if cut < 0 and lo + size + longest < total:
                raise _record_too_long(source, lo, size + longest, separator)
        hi = total if cut < 0 or cut + len(separator) >= total else cut + len(separator)
        yield Piece(whole[lo:min(hi + slack, total)], hi - lo, lo, hi >= total)
        lo = hi


def _decompressed_pieces(reader, size: int, separator: bytes, slack: int, buffers: _Buffers) -> Iterator[Piece]:
    carry, offset, longest = b"", 0, _setting(MAX_RECORD_ENV, MAX_RECORD)
    while True:
        want = len(carry) + size
        buf = buffers.take(want + slack)
        buf[:len(carry)] = carry
        end = _fill(reader, buf, len(carry), want)
        cut = buf.rfind(separator, 0, end)
        while cut < 0 and end == want:  # no separator in the whole piece: read on, as far as a record may go
            if end >= longest:
                raise _record_too_long(str(getattr(reader, "path", "the input")), offset, end, separator)
            # twice as much each time, the buffer grown in place (its pages moved, not copied): a
            # long record costs its length in copies, not its length squared over the piece size
            want = min(2 * end, longest + size)
            if len(buf) < want + slack:
                buf = _resized(buf, want + slack)
            searched_to, end = end, _fill(reader, buf, end, want)
            cut = buf.rfind(separator, max(0, searched_to - len(separator) + 1), end)
        if end < want:  # the input ended
            yield Piece(np.frombuffer(buf, np.uint8), end, offset, True, buf, buffers)
            return
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
            yield from _plain_pieces(_map_file(f), size, separator, slack, str(path))
            return
    yield from pieces_from(lambda: _Decompressing(path, kind), f"decompress {path.name}", size, separator, slack)


def pieces_from(opened: Callable[[], Any], name: str, size: int, separator: bytes, slack: int = 16
                ) -> Iterator[Piece]:
    """Like `pieces`, from any reader: `opened()` gives a context manager whose value has
    `readinto` (a decompressor, another program's output) and, optionally, `raise_damage` to say
    after the last piece why the input broke off. It is read one piece ahead in a thread named
    `name`."""
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
            with opened() as reader:
                for piece in _decompressed_pieces(reader, size, separator, slack, _Buffers()):
                    if not hand_over(piece):
                        return
                if hasattr(reader, "raise_damage"):
                    reader.raise_damage()  # after every piece before the break was handed on
        except BaseException as error:  # noqa: BLE001 - re-raised in the consumer
            hand_over(error)
            return
        hand_over(None)

    producer = threading.Thread(target=produce, name=name, daemon=True)
    producer.start()
    try:
        while (item := ahead.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        producer.join()
