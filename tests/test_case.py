"""The case store: ingest a bundle into Parquet, reopen it lazily, lose nothing, count nothing twice."""

from __future__ import annotations

import gzip
import json
import lzma
import shutil
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from forensics import CaseError, ingest, load_case, sources
from forensics.case import MANIFEST_VERSION
from forensics.sources.journal.cursor import whole_cursor
from forensics.sources.common.schema import EVENTS_SCHEMA, QUARANTINE_SCHEMA, schema_problems
from tests.conftest import REPO, export_entry, journalctl, to_journal

SAMPLE = REPO / "data" / "incidents" / "sample-sglang"


def test_sample_bundle_accounts_for_every_record(tmp_path: Path) -> None:
    manifest = ingest(SAMPLE, tmp_path / "case")
    totals = manifest["totals"]
    assert totals["records"] == totals["parsed"] + totals["quarantined"]
    assert totals["events"] == totals["parsed"] - totals["duplicates"]
    by_path = {e["path"]: e for e in manifest["inputs"]}
    assert by_path["journal/gpu-node-00.export.zst"] | {"sha256": None} == {
        "path": "journal/gpu-node-00.export.zst", "format": "journal_export", "sha256": None, "records": 3000,
        "parsed": 3000, "quarantined": 0, "duplicates": 0,
        "first_ts": "2026-06-18T21:20:00.000903+00:00", "last_ts": "2026-06-18T21:20:11.997214+00:00"}
    # The tail export repeats records of the full one: all of them are duplicates.
    assert by_path["journal/gpu-node-00.tail.export"]["duplicates"] == by_path["journal/gpu-node-00.tail.export"]["parsed"]
    assert by_path["journal/gpu-node-01.json.gz"]["format"] == "journal_json"
    # of its 5 records, 3 are damaged; "no timestamp at all" is well-formed: read with its time unknown
    assert by_path["journal/damaged.export"]["quarantined"] == 3
    tried = ", ".join(sorted(sources.registered()))
    assert manifest["skipped"] == [{"path": "notes.txt", "reason": f"not a recognised input (tried {tried})"}]


def test_case_reopens_lazily_with_declared_schemas(tmp_path: Path) -> None:
    ingest(SAMPLE, tmp_path / "case")
    case = load_case(tmp_path / "case")
    assert isinstance(case.events, pl.LazyFrame)
    assert schema_problems(case.events, EVENTS_SCHEMA) == []
    assert schema_problems(case.quarantine, QUARANTINE_SCHEMA, extra=None) == []
    events = case.events.collect()
    assert events.height == case.manifest["totals"]["events"]
    assert events.get_column("__CURSOR").drop_nulls().is_duplicated().sum() == 0  # records without one are not duplicates
    # one folder per host, each input's rows in the order it gave them (time order for a journal)
    hosts = sorted(p.name for p in (tmp_path / "case" / "events").iterdir())
    assert hosts == [f"host={h}" for h in sorted(events.get_column("host").unique().to_list())]
    assert events.group_by("source_file").agg((pl.col("ts").diff().dt.total_microseconds() >= 0).all()
                                                .alias("ordered")).get_column("ordered").all()
    untimed = events.filter(pl.col("message") == "no timestamp at all")
    assert untimed.height == 1 and untimed.get_column("ts").is_null().all()
    reasons = case.quarantine.collect().sort("source_file", "line").select("source_file", "line", "reason").rows()
    assert reasons[0] == ("journal/damaged.export", 1, "line 3: invalid field name 'message' (only A-Z, 0-9 and _ allowed)")


def test_reingest_is_idempotent(tmp_path: Path) -> None:
    first = ingest(SAMPLE, tmp_path / "case")
    events = load_case(tmp_path / "case").events.collect()
    second = ingest(SAMPLE, tmp_path / "case")
    assert first == second
    assert_frame_equal(load_case(tmp_path / "case").events.collect(), events)
    assert not (tmp_path / "case.partial").exists()


def _bundle_and_journal(tmp_path: Path, entries: int) -> tuple[Path, Path]:
    """An empty bundle folder, and a real journal of `entries` entries that systemd's tools wrote."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    export = b"".join(export_entry(("__REALTIME_TIMESTAMP", str(1781818487000000 + i)), ("MESSAGE", f"m{i}"))
                      for i in range(entries))
    return bundle, to_journal(export, tmp_path)


def test_overlapping_exports_of_one_journal_count_once(tmp_path: Path) -> None:
    bundle, journal = _bundle_and_journal(tmp_path, 10)
    (bundle / "all.export").write_bytes(journalctl(journal, "export"))
    (bundle / "all.json").write_bytes(journalctl(journal, "json"))
    (bundle / "var-log-journal").mkdir()
    shutil.copy(journal, bundle / "var-log-journal" / "system.journal")
    manifest = ingest(bundle, tmp_path / "case")
    assert manifest["totals"] == {"records": 30, "parsed": 30, "quarantined": 0, "duplicates": 20, "events": 10,
                                    "stack_frames": 0, "stack_dumps": 0, "samples": 0}
    assert [e["format"] for e in manifest["inputs"]] == ["journal_export", "journal_json", "journal_native"]


def _cursor_bundle(tmp_path: Path) -> tuple[Path, list[str]]:
    """A bundle of a real journal's export (systemd's own tools wrote both) and an export whose
    cursors journald did not write; every entry's cursor, in order."""
    bundle, journal = _bundle_and_journal(tmp_path, 5)
    (bundle / "a.export").write_bytes(journalctl(journal, "export"))
    shown = [json.loads(line)["__CURSOR"] for line in journalctl(journal, "json").splitlines()]
    boot = "0123456789abcdef0123456789abcdef"
    odd = [(f"s={boot};i=1;b={boot};m=0;t=6548df1f8cbc0;x=049f3e2279b99cdb", "0"),  # a zero-padded hash
           (f"s={boot};i=2;b={'f' * 32};m=0;t=6548df1f8cbc0;x=1", "0"),  # another boot than its entry's
           (f"s={boot};i=3;b={boot};m=1;t=6548df1f8cbc0;x=1", "0"),  # another monotonic time
           (f"s={boot};i=4;b={boot};m=0;t=6548df1f8cbc0;x=1", " 0"),  # its entry's, written with a space
           ("vector:cursor:42", "0")]  # a collector's own
    (bundle / "b.export").write_bytes(b"".join(
        export_entry(("__CURSOR", cursor), ("__REALTIME_TIMESTAMP", "1781818487000000"),
                     ("__MONOTONIC_TIMESTAMP", monotonic), ("_BOOT_ID", boot), ("MESSAGE", f"odd {n}"))
        for n, (cursor, monotonic) in enumerate(odd)))
    return bundle, shown + [cursor for cursor, _ in odd]


def test_every_cursor_comes_back_whole_from_the_case(tmp_path: Path) -> None:
    bundle, cursors = _cursor_bundle(tmp_path)
    ingest(bundle, tmp_path / "case")
    events = load_case(tmp_path / "case").events.sort("source_file", "source_offset").collect()
    assert events.get_column("__CURSOR").to_list() == cursors
    # journald's own are held as their values, the others as the text they came as
    stored = pl.read_parquet(tmp_path / "case" / "events").sort("source_file", "source_offset")
    assert stored.get_column("__CURSOR").to_list() == [None] * 5 + cursors[5:]
    assert stored.get_column("cursor_seqnum").to_list() == list(range(1, 6)) + [None] * 5


def test_one_cursor_held_two_ways_is_one_record(tmp_path: Path) -> None:
    # the same entry twice: once as journald wrote it (its cursor held as values), once with its
    # monotonic time spelled with a space (its cursor kept as text): one cursor, one record
    boot = "0123456789abcdef0123456789abcdef"
    cursor = f"s={boot};i=7;b={boot};m=0;t=6548df1f8cbc0;x=2a"
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "a.export").write_bytes(b"".join(
        export_entry(("__CURSOR", cursor), ("__REALTIME_TIMESTAMP", "1781818487000000"),
                     ("__MONOTONIC_TIMESTAMP", monotonic), ("_BOOT_ID", boot), ("MESSAGE", "once"))
        for monotonic in ("0", " 0")))
    manifest = ingest(bundle, tmp_path / "case")
    assert manifest["totals"]["duplicates"] == 1 and manifest["totals"]["events"] == 1
    assert load_case(tmp_path / "case").events.collect().get_column("__CURSOR").to_list() == [cursor]


def test_a_version_5_case_is_read_with_its_cursors_as_text(tmp_path: Path) -> None:
    # a case as version 5 wrote it: every cursor text, no cursor values
    bundle, cursors = _cursor_bundle(tmp_path)
    case = tmp_path / "case"
    ingest(bundle, case)
    whole = load_case(case).events.collect()
    for part in (case / "events").glob("*/*.parquet"):
        pl.read_parquet(part).with_columns(whole_cursor()).drop("cursor_seqnum_id", "cursor_seqnum",
                                                                 "cursor_xor").write_parquet(part)
    manifest = json.loads((case / "manifest.json").read_text())
    (case / "manifest.json").write_text(json.dumps(manifest | {"version": 5}))
    read = load_case(case).events.collect()
    assert sorted(read.get_column("__CURSOR").to_list()) == sorted(cursors)
    assert_frame_equal(read.drop("cursor_seqnum_id", "cursor_seqnum", "cursor_xor"),
                       whole.drop("cursor_seqnum_id", "cursor_seqnum", "cursor_xor"))


def test_an_unreadable_journal_is_reported_not_fatal(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "broken.journal").write_bytes(b"LPKSHHRH" + b"\x00" * 100)
    (bundle / "ok.export").write_bytes(export_entry(("__REALTIME_TIMESTAMP", "1781818487000000"), ("MESSAGE", "ok")))
    manifest = ingest(bundle, tmp_path / "case")
    broken = manifest["inputs"][0]
    assert broken["path"] == "broken.journal" and broken["records"] == 0
    assert broken["error"].startswith(f"{bundle / 'broken.journal'}: systemd cannot open it as a journal")
    assert manifest["totals"]["events"] == 1


@pytest.mark.parametrize("compress", [gzip.compress, lzma.compress])
def test_a_compressed_export_cut_short_keeps_what_came_before_the_break(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compress) -> None:
    from forensics.sources.journal import journal_export
    monkeypatch.setattr(journal_export, "CHUNK_BYTES", 4096)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    export = b"".join(export_entry(("__REALTIME_TIMESTAMP", str(1781818487000000 + i)), ("MESSAGE", f"line {i}"))
                      for i in range(20_000))
    packed = compress(export)
    (bundle / "cut.export.z").write_bytes(packed[:len(packed) // 2])
    (bundle / "ok.export").write_bytes(export_entry(("__REALTIME_TIMESTAMP", "1781818487000000"), ("MESSAGE", "ok")))
    manifest = ingest(bundle, tmp_path / "case")
    cut, ok = manifest["inputs"]
    assert cut["error"].startswith(f"{bundle / 'cut.export.z'}: ") and "damaged or cut short after" in cut["error"]
    assert 1000 < cut["records"] < 20_000 and cut["records"] == cut["parsed"] + cut["quarantined"]
    assert ok["records"] == 1 and "error" not in ok
    messages = load_case(tmp_path / "case").events.filter(pl.col("source_file") == "cut.export.z").collect()
    assert messages.get_column("message").to_list() == [f"line {i}" for i in range(messages.height)]


def test_load_case_names_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(CaseError, match="no manifest.json"):
        load_case(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"version": 1}))
    with pytest.raises(CaseError, match=f"case version 1, this forensics reads 5 and {MANIFEST_VERSION}; re-ingest"):
        load_case(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"version": MANIFEST_VERSION}))
    with pytest.raises(CaseError, match="missing the events dataset"):
        load_case(tmp_path)
    with pytest.raises(CaseError, match="not a directory"):
        ingest(tmp_path / "nope", tmp_path / "case")


def test_a_journal_folder_with_exports_beside_journal_files_reads_every_part(tmp_path: Path) -> None:
    from forensics.lab.reference import write_reference
    bundle = write_reference(tmp_path / "bundle", journal_formats=("export", "json", "journal"))
    manifest = ingest(bundle, tmp_path / "case")
    journal = {e["path"]: e for e in manifest["inputs"] if e["path"].startswith("journal/")}
    assert {p: e["format"] for p, e in journal.items()} == {
        "journal/gpu-node-00.export.zst": "journal_export", "journal/gpu-node-00.journal.d": "journal_native",
        "journal/gpu-node-00.json.zst": "journal_json"}
    assert all(e["records"] == e["parsed"] == 10_467 and not e.get("error") for e in journal.values())
    # the .journal systemd-journal-remote rebuilt from the export has cursors of its own but the same
    # records (host, boot, clocks, pid, message); journalctl's JSON of it repeats its cursors:
    # both are dropped as duplicates of the export, read first
    assert journal["journal/gpu-node-00.journal.d"]["duplicates"] == 10_467
    assert journal["journal/gpu-node-00.json.zst"]["duplicates"] == 10_467
    assert manifest["totals"]["events"] == 10_467


def test_identical_lines_within_one_input_are_all_kept(tmp_path: Path) -> None:
    """journald may log the same line twice in one microsecond; only a copy from another input is a duplicate."""
    same = [("__REALTIME_TIMESTAMP", "1781818200000000"), ("__MONOTONIC_TIMESTAMP", "5000"), ("_BOOT_ID", "b" * 32),
            ("_HOSTNAME", "h"), ("_PID", "7"), ("MESSAGE", "retrying")]
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "a.export").write_bytes(export_entry(("__CURSOR", "s=a;i=1"), *same)
                                      + export_entry(("__CURSOR", "s=a;i=2"), *same))
    (bundle / "b.export").write_bytes(export_entry(("__CURSOR", "s=b;i=9"), *same))
    manifest = ingest(bundle, tmp_path / "case")
    by_path = {e["path"]: e for e in manifest["inputs"]}
    assert by_path["a.export"]["duplicates"] == 0 and by_path["b.export"]["duplicates"] == 1
    assert manifest["totals"]["events"] == 2


def test_no_records_make_no_rows() -> None:
    import polars as pl

    from forensics.sources.journal.fields import assemble_events
    events, quarantine = assemble_events(pl.DataFrame(), source_file="empty.journal", fmt="journal_native")
    assert events.height == 0 and quarantine.height == 0
