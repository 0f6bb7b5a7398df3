"""No bound-less read: a gzip that expands a thousandfold, a tiny tarball holding a sparse 40 GB file,
a member nested 2,000 folders deep, a line of megabytes. Each keeps what it can, and says what it
did not read and why (memory at full size is measured in `bench/bounded_reads.py`, not here)."""

from __future__ import annotations

import gzip
import shutil
import tarfile
from pathlib import Path

import pytest

from forensics.case.build import read_bundle
from forensics.case.bundle import open_bundle


def test_a_gzip_bomb_stops_at_the_decompression_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORENSICS_MAX_EXPANSION", "4")  # 4 × (at least 1 MiB) of the compressed size
    metrics = tmp_path / "bundle" / "metrics"
    metrics.mkdir(parents=True)
    body = b"sglang:num_running_reqs 1\n" + b"\n" * (64 << 20)
    (metrics / "scrapes.prom.gz").write_bytes(gzip.compress(body, 9))
    frames, manifest = read_bundle(tmp_path / "bundle")
    (entry,) = manifest["inputs"]
    assert "decompression limit reached after 4,194,304 bytes" in (entry.get("error") or "") + str(entry.get("notes"))
    assert frames["samples"].height == 1  # what came before the limit was read


@pytest.mark.skipif(shutil.which("tar") is None or shutil.which("truncate") is None, reason="GNU tar needed")
def test_a_tiny_tarball_holding_a_sparse_40_gb_file_is_not_unpacked(tmp_path: Path) -> None:
    from forensics.lab.synth import sparse_tarball

    tarball = sparse_tarball(tmp_path)
    assert tarball.stat().st_size < 1 << 20
    with open_bundle(tarball) as folder:
        frames, manifest = read_bundle(folder)
    reasons = {s["path"]: s["reason"] for s in manifest["skipped"]}
    (huge,) = [r for p, r in reasons.items() if p.endswith("huge.log")]
    assert "42,949,672,960 bytes (a sparse file), over what the tarball may still unpack to" in huge
    assert frames["events"].height == 1


def test_a_member_nested_2000_folders_deep_is_refused_with_its_depth(tmp_path: Path) -> None:
    tarball = tmp_path / "deep.tar"
    with tarfile.open(tarball, "w") as tar:
        info = tarfile.TarInfo("/".join(["d"] * 2000) + "/x.log")
        data = b"[2026-06-18 21:00:00] deep\n"
        info.size = len(data)
        import io

        tar.addfile(info, io.BytesIO(data))
    with open_bundle(tarball) as folder:
        _, manifest = read_bundle(folder)
    assert any("nested 2000 folders deep (at most 64)" in s["reason"] for s in manifest["skipped"])


def test_a_line_longer_than_the_limit_is_quarantined_with_its_length(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORENSICS_MAX_LINE", "1000")
    logs = tmp_path / "bundle" / "logs"
    logs.mkdir(parents=True)
    (logs / "server.log").write_text("[2026-06-18 21:00:00] before\n[2026-06-18 21:00:01] " + "x" * 5000
                                     + "\n[2026-06-18 21:00:02] after\n")
    frames, manifest = read_bundle(tmp_path / "bundle")
    (entry,) = manifest["inputs"]
    assert (entry["records"], entry["parsed"], entry["quarantined"]) == (3, 2, 1)
    (reason,) = frames["quarantine"].get_column("reason").to_list()
    assert reason == "a line of 5,022 bytes, over the longest a line may be (FORENSICS_MAX_LINE): not read"
    assert frames["events"].get_column("message").to_list() == ["[2026-06-18 21:00:00] before",
                                                                 "[2026-06-18 21:00:02] after"]


def test_an_input_of_millions_of_empty_lines_stops_at_the_line_limit(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORENSICS_MAX_LINES", "1000")
    metrics = tmp_path / "bundle" / "metrics"
    metrics.mkdir(parents=True)
    (metrics / "scrapes.prom").write_bytes(b"sglang:num_running_reqs 1\n" + b"\n" * 5000 + b"late_sample 2\n")
    frames, manifest = read_bundle(tmp_path / "bundle")
    (entry,) = manifest["inputs"]
    said = str(entry.get("error")) + str(entry.get("notes"))
    assert "line limit reached after 1,000 lines (FORENSICS_MAX_LINES)" in said
    assert frames["samples"].height == 1


def test_a_binary_length_of_2_63_says_how_many_entries_it_swallowed(tmp_path: Path) -> None:
    import struct

    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "x.export").write_bytes(
        b"__REALTIME_TIMESTAMP=1781818000000000\nMESSAGE\n" + struct.pack("<Q", 2**63) + b"abc\n\n"
        + b"__REALTIME_TIMESTAMP=1781818001000000\nMESSAGE=second entry\n\n"
        + b"__REALTIME_TIMESTAMP=1781818002000000\nMESSAGE=third entry\n\n")
    frames, _ = read_bundle(bundle)
    (reason,) = frames["quarantine"].get_column("reason").to_list()
    assert reason.endswith("those bytes hold about 2 more entries by their blank lines, not read")


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "zstd"])
def test_an_export_with_no_blank_line_for_gigabytes_ends_at_the_record_limit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compressed: bool) -> None:
    """A run with no entry boundary is not held whole: 61 KB of zstd held 2 GB of it, which took 7 GB
    of memory and 3.5 minutes before the scanner refused the piece with a traceback."""
    import zstandard

    monkeypatch.setenv("FORENSICS_MAX_RECORD", str(1 << 20))
    head = b"".join(b"__REALTIME_TIMESTAMP=178181800%d000000\n_HOSTNAME=h\nMESSAGE=entry %d\n\n" % (i, i)
                    for i in range(3))
    body = head + b"MESSAGE=" + b"a" * (40 << 20) + b"\n\n__REALTIME_TIMESTAMP=1781818009000000\nMESSAGE=late\n\n"
    journal = tmp_path / "bundle" / "journal"
    journal.mkdir(parents=True)
    (journal / ("h.export.zst" if compressed else "h.export")).write_bytes(
        zstandard.ZstdCompressor().compress(body) if compressed else body)
    frames, manifest = read_bundle(tmp_path / "bundle")
    (entry,) = manifest["inputs"]
    assert f"from byte {len(head):,}: a record longer than the longest one may be (FORENSICS_MAX_RECORD)" \
        in entry["error"]
    assert frames["events"].get_column("message").to_list() == ["entry 0", "entry 1", "entry 2"]
    assert entry["records"] == entry["parsed"] + entry["quarantined"] == 3


@pytest.mark.parametrize("form", ["export", "json"])
def test_a_journal_naming_thousands_of_distinct_fields_quarantines_the_entries_past_the_bound(
        tmp_path: Path, form: str) -> None:
    """Each distinct field name is a column: 100 entries naming 1,000 fields each (1 MB) used up
    the process's memory mappings in an export (a polars panic ended the ingest) and made a case of
    100,000 columns from journalctl's JSON. A reader holds 4,096 names (the export's scanner, a piece
    of ~16 MB); an entry naming one past them is quarantined with the reason."""
    import json

    shared = {"__REALTIME_TIMESTAMP": "1750000000000000", "_HOSTNAME": "h", "MESSAGE": "hello"}

    def entry(i: int) -> bytes:
        fields = {**shared, **{f"F{i}_{j}": "x" for j in range(1000)}}
        if form == "json":
            return (json.dumps(fields) + "\n").encode()
        return ("".join(f"{k}={v}\n" for k, v in fields.items()) + "\n").encode()

    journal = tmp_path / "bundle" / "journal"
    journal.mkdir(parents=True)
    (journal / f"h.{form}").write_bytes(b"".join(entry(i) for i in range(100)))
    frames, manifest = read_bundle(tmp_path / "bundle")
    (said,) = manifest["inputs"]
    kept = (4096 - len(shared)) // 1000  # whole entries whose names fit within the bound
    assert (said["records"], said["parsed"], said["quarantined"]) == (100, kept, 100 - kept)
    reasons = set(frames["quarantine"].get_column("reason").to_list())
    assert len(reasons) == 100 - kept and all("distinct field names" in r and "past the 4,096" in r for r in reasons)
    assert frames["events"].height == kept and frames["events"].width < 4096 + 64
