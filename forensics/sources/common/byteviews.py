"""Zero-copy slices of a byte buffer as an Arrow/polars Binary column.

Parsers find field boundaries with numpy; this turns (start, end) arrays into a `BinaryView`
column whose long values point into the original buffer (often a memory map) instead of copying
every value into a Python object. Values of up to 12 bytes are stored inline, as the Arrow
BinaryView layout requires.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa

from forensics.sources.common.frames import arrow_series

_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
SLACK = 16  # bytes read past a value's start to fill the inline part of its view


def _words(buf: np.ndarray) -> np.ndarray:
    """Every little-endian 8-byte word of `buf`, one per starting byte (an overlapping view)."""
    return np.ndarray((buf.shape[0] - 7,), dtype="<u8", buffer=buf, strides=(1,))


def binary_views(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, valid: np.ndarray | None = None) -> pl.Series:
    """A Binary series whose i-th value is buf[starts[i]:ends[i]] (null where `valid` is False),
    without copying long values.

    Reads up to `SLACK` bytes from each start; where `buf` is shorter than that it is copied with
    zero padding (callers avoid it by passing a view that runs on past the region they parse).
    """
    n = len(starts)
    if valid is not None:
        starts = np.where(valid, starts, 0)
        ends = np.where(valid, ends, 0)
    lengths = (ends - starts).astype(np.int64)
    views = np.zeros((n, 4), np.uint32)
    views[:, 0] = lengths
    if n:
        if int(starts.max()) + SLACK > buf.shape[0]:
            padded = np.zeros(buf.shape[0] + SLACK, np.uint8)
            padded[:buf.shape[0]] = buf
            buf = padded
        words = _words(buf)
        first8 = words[starts]
        next4 = words[starts + 8] & np.uint64(0xFFFFFFFF)
        inline = lengths <= 12
        nbytes_lo = np.minimum(lengths, 8).astype(np.uint64)
        mask_lo = np.where(nbytes_lo >= 8, _ALL, (np.uint64(1) << (nbytes_lo * np.uint64(8))) - np.uint64(1))
        nbytes_hi = np.clip(lengths - 8, 0, 4).astype(np.uint64)
        mask_hi = (np.uint64(1) << (nbytes_hi * np.uint64(8))) - np.uint64(1)
        lo = first8 & mask_lo
        views[:, 1] = lo.astype(np.uint32)  # keeps the low 4 bytes: prefix or inline bytes 0-3
        views[:, 2] = np.where(inline, (lo >> np.uint64(32)).astype(np.uint32), 0)
        views[:, 3] = np.where(inline, (next4 & mask_hi).astype(np.uint32), starts.astype(np.uint32))
    validity = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    array = pa.Array.from_buffers(pa.binary_view(), n, [validity, pa.py_buffer(views), pa.py_buffer(buf)])
    return arrow_series(array)


def dense_binary(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, valid: np.ndarray | None = None
                 ) -> pl.Series:
    """A Binary series whose i-th value is a copy of buf[starts[i]:ends[i]] (null where `valid` is
    False), the values laid end to end in one buffer. `starts` must not decrease and each value
    must end before the next starts (a field's values in file order).

    Why a copy: views into a large buffer (a decompressed export) are scattered through it, and
    scanning them is several times slower than scanning the same values laid end to end
    (measured: a regex over 1 M messages 0.15 s against 0.025 s); the large buffer can also be
    let go once parsed. How: the buffer is described as one Arrow array alternating values and
    the gaps between them (offsets only, nothing copied), and Arrow's `take` of every other
    element copies the values out in one pass."""
    n = len(starts)
    if valid is not None:
        reach = np.maximum.accumulate(np.where(valid, ends, 0)) if n else ends
        starts, ends = np.where(valid, starts, reach), np.where(valid, ends, reach)
    offsets = np.empty(2 * n + 1, np.int64)
    offsets[0:2 * n:2] = starts
    offsets[1:2 * n:2] = ends
    offsets[2 * n] = ends[-1] if n else 0
    spread = pa.Array.from_buffers(pa.large_binary(), 2 * n, [None, pa.py_buffer(offsets), pa.py_buffer(buf)])
    picks = pa.array(np.arange(0, 2 * n, 2), mask=None if valid is None else ~valid)
    return pl.Series(spread.take(picks))
