"""Zero-copy byte views equal plain Python slicing."""

from __future__ import annotations

import numpy as np

from forensics.sources.common.byteviews import binary_views, dense_binary


def test_views_equal_slices_at_every_length_and_position() -> None:
    rng = np.random.default_rng(5)
    data = rng.integers(0, 256, size=300, dtype=np.uint8).tobytes()
    starts = rng.integers(0, 300, size=3000)
    ends = np.minimum(starts + rng.integers(0, 40, size=3000), 300)
    starts = np.append(starts, [295, 300, 0])
    ends = np.append(ends, [300, 300, 300])
    buf = np.frombuffer(data, np.uint8)
    assert binary_views(buf, starts, ends).to_list() == [data[s:e] for s, e in zip(starts, ends)]
    assert binary_views(buf, starts[:0], ends[:0]).to_list() == []


def test_dense_copies_equal_slices_with_nulls_and_empty_values() -> None:
    rng = np.random.default_rng(9)
    data = rng.integers(0, 256, size=5000, dtype=np.uint8).tobytes()
    cuts = np.sort(rng.integers(0, 5000, size=1200))
    starts, ends = cuts[0::2], cuts[1::2]  # in file order, each value before the next, some empty
    valid = rng.random(len(starts)) > 0.3
    buf = np.frombuffer(data, np.uint8)
    expected = [data[s:e] if ok else None for s, e, ok in zip(starts, ends, valid)]
    assert dense_binary(buf, starts, ends, valid).to_list() == expected
    assert dense_binary(buf, starts, ends).to_list() == [data[s:e] for s, e in zip(starts, ends)]
    assert dense_binary(buf, starts[:0], ends[:0]).to_list() == []
    none = np.zeros(len(starts), bool)
    assert dense_binary(buf, starts, ends, none).null_count() == len(starts)
