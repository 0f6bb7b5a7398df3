"""Zero-copy byte views equal plain Python slicing."""

from __future__ import annotations

import numpy as np

from forensics.byteviews import binary_views


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
