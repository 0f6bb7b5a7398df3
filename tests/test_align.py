"""The alignment's monotonic-clock check on its own: a step is a change of realtime minus
monotonic between consecutive records of one boot of one host, never across boots or hosts."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import polars as pl
import pytest

from forensics.timeline.clocks import clock_jumps


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


def test_hosts_in_different_zones_have_their_line_stamps_read_each_in_its_own(tmp_path: Path) -> None:
    """The incident host logs in Shanghai time with a skewed clock, its neighbour in UTC: after
    alignment each host's log-line stamps agree with journald's times (one pass per zone)."""
    from forensics.analyze import analyze
    from forensics.lab.reference import write_reference

    bundle = write_reference(tmp_path / "bundle", hosts=2, time_zone="Asia/Shanghai", skew_s=7.5)
    checks = {row["host"]: row for row in analyze(bundle, tmp_path / "case").timeline.clock_checks.to_dicts()}
    assert checks["gpu-node-00"]["time_zone"] == "Asia/Shanghai" and checks["gpu-node-01"]["time_zone"] == "UTC"
    for row in checks.values():
        assert abs(row["line_minus_journal_s"]) < 1.0, row


def test_records_without_journal_clocks_have_no_steps() -> None:
    """Plain-text log lines carry no realtime/monotonic pair: nothing to compare, no error."""
    events = pl.DataFrame({"ts": [datetime(2026, 6, 18, 21, 0, s, tzinfo=timezone.utc) for s in range(3)],
                           "host": ["h"] * 3, "_BOOT_ID": [None] * 3, "__REALTIME_TIMESTAMP": [None] * 3,
                           "__MONOTONIC_TIMESTAMP": [None] * 3, "message": ["a", "b", "c"],
                           "source_file": ["f"] * 3, "source_offset": [None] * 3, "source_line": [1, 2, 3]},
                          schema_overrides={"_BOOT_ID": pl.String, "__REALTIME_TIMESTAMP": pl.Int64,
                                            "__MONOTONIC_TIMESTAMP": pl.Int64, "source_offset": pl.Int64})
    assert clock_jumps(events).is_empty()


@pytest.mark.parametrize("sliced", [False, True], ids=["whole", "a slice per core"])
def test_the_timeline_read_from_the_rows_an_ingest_holds_is_the_one_read_from_its_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sliced: bool) -> None:
    """The analysis reads its timeline from the journal rows its ingest still holds in memory, not
    from the files it just wrote (and a big host's rows in a slice per core, side by side): every
    way gives the same timeline, line for line, its columns cut into the same pieces."""
    import forensics.timeline.align as align_module
    import forensics.timeline.host_read as host_read_module

    if sliced:  # and the journal read in many small pieces, as a big one is
        import forensics.sources.journal.journal_export as export_module

        monkeypatch.setattr(host_read_module, "HELD_SLICE_ABOVE", 1)
        monkeypatch.setattr(export_module, "CHUNK_BYTES", 64 << 10)
    layouts: list[set[tuple[int, ...]]] = []
    read_host = align_module.read_host

    def spied(*args: object) -> object:
        host = read_host(*args)
        layouts.append({tuple(column.chunk_lengths()) for column in host.events.get_columns()})
        return host

    monkeypatch.setattr(align_module, "read_host", spied)
    from forensics.case.build import Held, ingest
    from forensics.case.opened import load_case
    from forensics.case.incident import load_incident
    from forensics.lab.reference import write_reference
    from forensics.profiles import load_profile
    from forensics.timeline.align import build_timeline

    bundle = write_reference(tmp_path / "two-hosts", hosts=2)
    held = Held(keep_events=10**9)
    ingest(bundle, tmp_path / "case", held=held)
    assert len(held.events) == 2
    profile = load_profile("sglang")
    from_memory = load_case(tmp_path / "case")
    from_memory.held_events = held.events
    # what is asked of the events before the timeline takes the rows over: the same from either
    columns = ["host", "ts", "source_file", "message"]
    assert from_memory.events_of(columns).collect().equals(load_case(tmp_path / "case").events_of(columns).collect())
    assert "parquet" not in from_memory.events_of(columns).explain().lower()
    timelines = [build_timeline(case, load_incident(bundle, profile), profile)
                 for case in (from_memory, load_case(tmp_path / "case"))]
    assert not from_memory.held_events  # released once read
    first, second = timelines
    assert first.events.height > 10_000
    assert first.events.equals(second.events)
    # each host's lines cut alike, or polars' operations on them would copy every column into one piece
    assert layouts and all(len(layout) == 1 for layout in layouts), layouts
    for name in ("activity", "source_gaps", "progress_streams", "progress_gaps", "progress_counts", "jumps",
                 "clock_checks", "request_pairs"):
        ours, theirs = getattr(first, name), getattr(second, name)  # tables by group: in no set order
        assert ours.sort(ours.columns, nulls_last=True).equals(theirs.sort(theirs.columns, nulls_last=True)), name


def test_scrapes_held_by_the_timeline_are_the_ones_read_from_the_case(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Up to HELD_SAMPLES scrapes the timeline reads them once and holds them; above it each question
    reads the case anew. Either way the samples are the same rows and the analysis finds the same."""
    import forensics.timeline.align as align_module
    from forensics.analyze import analyze
    from forensics.lab.reference import write_reference

    bundle = write_reference(tmp_path / "reference")
    held = analyze(bundle, tmp_path / "held")
    monkeypatch.setattr(align_module, "HELD_SAMPLES", 0)
    read_anew = analyze(bundle, tmp_path / "read-anew")
    plans = [a.timeline.samples.explain() for a in (held, read_anew)]
    assert "parquet" not in plans[0].lower() and "parquet" in plans[1].lower(), plans
    ours, theirs = (a.timeline.samples.collect() for a in (held, read_anew))
    assert ours.height > 1_000 and ours.equals(theirs)
    assert [(f.kind, f.at, f.text) for f in held.findings] == [(f.kind, f.at, f.text) for f in read_anew.findings]
    # the scrapes are evidence of findings (the reference: a counter that restarted, a frozen engine)
    assert any(e.frame == "samples" for f in held.findings for e in f.evidence)
