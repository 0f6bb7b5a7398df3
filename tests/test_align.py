"""The alignment's monotonic-clock check on its own: a step is a change of realtime minus
monotonic between consecutive records of one boot of one host, never across boots or hosts."""

from __future__ import annotations

from datetime import datetime, timezone

import polars as pl

from forensics.align import clock_jumps


def test_a_step_is_found_within_a_boot_and_never_between_boots_or_hosts() -> None:
    rows = [  # host, boot, realtime s, monotonic s (file order deliberately mixed)
        ("a", "boot1", 1000, 10), ("b", "boot1", 5000, 10), ("a", "boot1", 1001, 11),
        ("a", "boot2", 9000, 1),  # a reboot: a new drift, not a step
        ("a", "boot1", 1062, 12),  # +60 s step within boot1 of host a
        ("b", "boot1", 5001, 11), (None, "boot3", 7000, 5), (None, "boot3", 7001, 6),
        ("a", "boot2", 9001, 2), ("b", "boot9", 100, None),
    ]
    events = pl.DataFrame({
        "host": [r[0] for r in rows], "_BOOT_ID": [r[1] for r in rows],
        "__REALTIME_TIMESTAMP": [r[2] * 1_000_000 for r in rows],
        "__MONOTONIC_TIMESTAMP": [None if r[3] is None else r[3] * 1_000_000 for r in rows],
        "ts": [datetime.fromtimestamp(r[2], timezone.utc) for r in rows],
        "message": [f"row {i}" for i in range(len(rows))],
        "source_file": "x.export", "source_offset": list(range(len(rows))), "source_line": list(range(len(rows))),
    })
    jumps = clock_jumps(events)
    assert jumps.select("host", "_BOOT_ID", "jump_s", "message_before", "message").rows() == [
        ("a", "boot1", 60.0, "row 2", "row 4")]
