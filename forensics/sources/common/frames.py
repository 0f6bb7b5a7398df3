"""Polars frames built from columns as they are, without the copies polars' eager operations make.

Rows held from an ingest, sliced or concatenated come in many pieces (chunks). Polars' eager
`select`, `drop` and `with_columns` put such a frame into one piece, copying every value they
keep, and a frame whose columns are cut at different rows is put into one piece by nearly every
operation on it: at a million journal lines, each such copy cost a detector 0.1–0.5 s and up to
900 MB. These helpers build frames from the columns themselves, cut alike.
"""

from __future__ import annotations

from typing import Any

import polars as pl


class _ArrowCArray:
    """An Arrow array seen through the Arrow C data interface alone (its PyCapsule protocol)."""

    __slots__ = ("array",)

    def __init__(self, array: Any) -> None:
        self.array = array

    def __arrow_c_array__(self, requested_schema: object | None = None) -> object:
        return self.array.__arrow_c_array__(requested_schema)


def arrow_series(array: Any, name: str = "") -> pl.Series:
    """A pyarrow array in one piece as a polars Series named `name`, handed over through the Arrow
    C data interface, its buffers as they are. Polars' own pyarrow path imports `pyarrow.compute`
    on its first call, for arrays in many pieces only: ~90 ms of every cold analysis, spent in the
    first piece a journal scanner's worker read while the other waited on the import."""
    return pl.Series(_ArrowCArray(array)).alias(name)


def columns_of_frame(frame: pl.DataFrame, names: list[str], *added: pl.Series) -> pl.DataFrame:
    """`frame`'s columns `names`, in that order, as they are, then the `added` columns (cut into
    the same pieces). Polars' eager `select`, `drop` and `with_columns` put a frame of many pieces
    (rows concatenated, sliced or held from an ingest) into one, copying every value they keep; and
    a frame whose columns are cut at different rows is put into one piece by most operations on it.
    No value of `frame`'s columns is copied."""
    kept = [frame.get_column(name) for name in names]
    return pl.DataFrame([*kept, *(in_pieces_like(column, kept[0]) if kept else column for column in added)],
                        height=frame.height)


def replace_columns(frame: pl.DataFrame, *columns: pl.Series) -> pl.DataFrame:
    """`frame` with each of `columns` in place of its column of that name, cut into the frame's
    pieces (`columns_of_frame`'s reason: no value of the others is copied)."""
    given = {column.name: column for column in columns}
    return pl.DataFrame([in_pieces_like(given[name], frame.get_column(name)) if name in given
                         else frame.get_column(name) for name in frame.columns], height=frame.height)


def in_pieces_like(column: pl.Series, like: pl.Series) -> pl.Series:
    """`column` cut at the rows where `like`'s pieces end: views of its own pieces, a piece copied
    only where it would straddle one of `column`'s own cuts. A frame's columns cut alike stay as
    they are through polars' operations."""
    lengths = like.chunk_lengths()
    if column.chunk_lengths() == lengths:
        return column
    if len(lengths) <= 1:
        return column.rechunk()
    parts, start = [], 0
    for length in lengths:
        part = column.slice(start, length)
        parts.append(part.rechunk() if part.n_chunks() > 1 else part)
        start += length
    return pl.concat(parts, rechunk=False)


def cut_alike(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with every column cut like its most finely cut one (`in_pieces_like`)."""
    columns = frame.get_columns()
    if not columns:
        return frame
    finest = max(columns, key=lambda column: column.n_chunks())
    return pl.DataFrame([in_pieces_like(column, finest) for column in columns], height=frame.height)
