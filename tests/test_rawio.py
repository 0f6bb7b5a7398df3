"""rawio: whole files and pieces of them, plain or compressed, byte for byte."""

from __future__ import annotations

import gzip
import lzma
import random
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import zstandard

from forensics.sources.common import rawio
from forensics.errors import ParseError
from forensics.sources.common.byteviews import binary_views

COMPRESSORS = {
    "plain": lambda data: data,
    "gzip": gzip.compress,
    "zstd": lambda data: zstandard.ZstdCompressor().compress(data),
    "xz": lzma.compress,
}


def _records(count: int, seed: int = 7) -> bytes:
    """Records of uneven length separated by blank lines; some hold a lone newline."""
    rng = random.Random(seed)
    parts = []
    for i in range(count):
        body = "x" * rng.randrange(0, 300)
        parts.append(f"NUMBER={i}\nBODY={body}\n" + ("ONE\nLINE\n" if i % 7 == 0 else "") + "\n")
    return "".join(parts).encode()


@pytest.mark.parametrize("kind", COMPRESSORS)
def test_pieces_cover_the_file_and_end_at_separators(tmp_path: Path, kind: str) -> None:
    data = _records(5000)
    path = tmp_path / f"records.{kind}"
    path.write_bytes(COMPRESSORS[kind](data))
    pieces = list(rawio.pieces(path, 4096, b"\n\n", slack=16))
    assert len(pieces) > 10
    assert b"".join(bytes(p.data[:p.length]) for p in pieces) == data
    assert [p.offset for p in pieces] == [sum(q.length for q in pieces[:i]) for i in range(len(pieces))]
    for piece in pieces[:-1]:
        assert not piece.at_eof and bytes(piece.data[piece.length - 2:piece.length]) == b"\n\n"
        assert len(piece.data) >= piece.length + 16  # room for views to read past a value's start
    assert pieces[-1].at_eof
    joined = pieces[0].joined(pieces[1], 16)
    assert bytes(joined.data[:joined.length]) == data[:pieces[0].length + pieces[1].length]
    assert rawio.read_all(path)[:] == data


def test_a_piece_grows_until_it_holds_a_separator(tmp_path: Path) -> None:
    data = b"A=" + b"y" * 50_000 + b"\n\nB=1\n\n"
    for kind in ("plain", "zstd"):
        path = tmp_path / f"long.{kind}"
        path.write_bytes(COMPRESSORS[kind](data))
        pieces = list(rawio.pieces(path, 1024, b"\n\n"))
        first = bytes(pieces[0].data[:pieces[0].length])
        assert first.startswith(data[:50_004]) and first.endswith(b"\n\n")
        assert b"".join(bytes(p.data[:p.length]) for p in pieces) == data



def _views_held_as_a_profiler_holds_them(monkeypatch: pytest.MonkeyPatch) -> list[memoryview]:
    """Every buffer `_fill` reads into keeps a view alive afterwards, as when Dask's sampling
    profiler holds the frame of the `readinto` that got it (seen on a worker: the reader failed with
    "mmap can't resize with extant buffers exported" and the input's rows were left out)."""
    held: list[memoryview] = []
    fill = rawio._fill

    def holding(reader, buf, start, end):  # type: ignore[no-untyped-def]
        held.append(memoryview(buf)[start:end])
        return fill(reader, buf, start, end)

    monkeypatch.setattr(rawio, "_fill", holding)
    return held


@pytest.mark.parametrize("kind", ["gzip", "zstd"])
def test_a_view_held_elsewhere_does_not_fail_the_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      kind: str) -> None:
    held = _views_held_as_a_profiler_holds_them(monkeypatch)
    small = _records(50)  # one block: its end is given back by a resize
    path = tmp_path / f"small.{kind}"
    path.write_bytes(COMPRESSORS[kind](small))
    data, damage = rawio.read_whole(path)
    assert damage is None and bytes(data) == small and len(data) == len(small)
    long_record = b"A=" + b"y" * 50_000 + b"\n\nB=1\n\n"  # a piece grown past its buffer
    path = tmp_path / f"long.{kind}"
    path.write_bytes(COMPRESSORS[kind](long_record))
    assert b"".join(bytes(p.data[:p.length]) for p in rawio.pieces(path, 1024, b"\n\n")) == long_record
    assert held  # the views were there throughout

@pytest.mark.parametrize("kind", COMPRESSORS)
def test_empty_files(tmp_path: Path, kind: str) -> None:
    path = tmp_path / f"empty.{kind}"
    path.write_bytes(COMPRESSORS[kind](b""))
    assert rawio.read_all(path)[:] == b""
    (piece,) = rawio.pieces(path, 1024, b"\n\n")
    assert piece.length == 0 and piece.at_eof


@pytest.mark.parametrize("kind", COMPRESSORS)
def test_release_never_loses_bytes(tmp_path: Path, kind: str) -> None:
    """Released pages of a file map come back from the file; decompressed bytes are kept."""
    data = _records(20_000)
    path = tmp_path / f"records.{kind}"
    path.write_bytes(COMPRESSORS[kind](data))
    whole = rawio.read_all(path)
    rawio.release(whole, 0, 10_001)
    assert whole[:] == data


def test_damaged_data_is_named_with_how_far_it_got(tmp_path: Path) -> None:
    path = tmp_path / "broken.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(_records(2000))[:-200] + b"\x00" * 200)
    with pytest.raises(ParseError, match=rf"^{path}: zstd data damaged or cut short after [0-9,]+ decompressed bytes"):
        list(rawio.pieces(path, 4096, b"\n\n"))
    with pytest.raises(ParseError, match=rf"^{path}: zstd data damaged"):
        rawio.read_all(path)


def test_released_pieces_carry_later_ones_unless_something_still_points_into_them(tmp_path: Path) -> None:
    data = _records(20_000)
    path = tmp_path / "records.zst"
    path.write_bytes(COMPRESSORS["zstd"](data))
    kept, addresses, seen = None, [], b""
    for i, piece in enumerate(rawio.pieces(path, 4096, b"\n\n")):
        addresses.append(piece.data.ctypes.data)
        seen += bytes(piece.data[:piece.length])
        if i == 1:  # a column made from this piece: its memory must not be handed on
            first = bytes(piece.data[:piece.length])
            kept = binary_views(piece.data, np.array([0]), np.array([piece.length]))
        piece.release()
    assert seen == data
    assert len(set(addresses)) < len(addresses) / 4  # a few buffers went round
    assert addresses.count(addresses[1]) == 1  # the one still pointed into was never reused
    assert kept.to_list() == [first]


def test_a_reader_that_stops_early_stops_the_decompression(tmp_path: Path) -> None:
    path = tmp_path / "records.zst"
    path.write_bytes(COMPRESSORS["zstd"](_records(20_000)))
    reader = rawio.pieces(path, 4096, b"\n\n")
    next(reader)
    time.sleep(0.3)  # the decompressing thread fills the hand-over queue and waits
    reader.close()  # returns only once that thread has finished
    assert not [t for t in threading.enumerate() if t.name == f"decompress {path.name}"]


@pytest.mark.parametrize("stretch", [2, 3, 64 << 10], ids=["searched, small", "searched, odd", "counted"])
def test_long_lines_are_the_ones_a_split_finds(monkeypatch: pytest.MonkeyPatch, stretch: int) -> None:
    """The lines `cut_long_lines` empties, their numbers and lengths, are those of a plain split of
    the text, whether found by a search per stretch of half the limit or by counting every newline;
    the text left is the text with exactly those lines emptied."""
    monkeypatch.setattr(rawio, "SEARCHED_STRETCH", stretch)
    rng = random.Random(stretch)
    for _ in range(400):
        lines = [b"x" * rng.choice([0, 1, 3, 5, 8, 9, 10, 11, 17, 40]) for _ in range(rng.randrange(1, 30))]
        data = b"\n".join(lines) + rng.choice([b"", b"\n"])
        limit = rng.choice([4, 5, 8, 9, 10])
        kept, long = rawio.cut_long_lines(data, limit)
        split = data.split(b"\n")
        if data.endswith(b"\n"):
            split = split[:-1]
        expected = [(n, len(line)) for n, line in enumerate(split, start=1) if len(line) > limit]
        assert long == (expected if len(data) > limit else []), (data, limit)
        emptied = [b"" if len(line) > limit else line for line in split]
        assert kept == (b"\n".join(emptied) + (b"\n" if data.endswith(b"\n") else b"") if long else data)
