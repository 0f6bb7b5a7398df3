"""Hostile inputs at full size, each ingested by `forensics ingest` in a fresh process: peak memory
against the documented bounds, and what the ingest kept and said.

- a gzip of 4 GiB of newlines after one sample (about 4 MB compressed): read up to the
  decompression limit (100 × the compressed size, at most 2 GiB), then stopped with its reason;
- a .tar.gz of a few KB holding a sparse 40 GB server log beside a real one: the huge member is
  not unpacked (over FORENSICS_MAX_UNPACKED, 8 GiB), the real one is read;
- a server log holding one 2 GB line between two ordinary ones: the line is quarantined with its
  length (over FORENSICS_MAX_LINE, 1 MiB), the others read;
- a zstd journal export of three entries, then 4 GiB with no blank line (about 130 KB compressed):
  read in pieces, the run is held up to FORENSICS_MAX_RECORD (1 GiB) and the input ends there with
  its reason, the three entries kept;
- a 2 GB journal export of 2,000 entries of 1 MiB each: written as parts of at most 256 MiB of rows
  (PART_BYTES) and merged in row groups of at most ~64 MiB (GROUP_BYTES), not held until the
  250,000th row.

Each run here checks its own work (the manifest's counts and reasons), so a run that read nothing
cannot pass for a fast one.
"""

from __future__ import annotations

import gzip
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.measure import Measurement, run
from forensics.lab.synth import sparse_tarball

FORENSICS = str(Path(sys.executable).parent / "forensics")


def _bomb(folder: Path) -> Path:
    metrics = folder / "bomb" / "metrics"
    metrics.mkdir(parents=True)
    with gzip.open(metrics / "scrapes.prom.gz", "wb", compresslevel=9) as out:
        out.write(b"sglang:num_running_reqs 1\n")
        _write_run(out, b"\n", 4)
    return folder / "bomb"


def _write_run(out: Any, byte: bytes, gib: int) -> None:
    """`gib` GiB of `byte` written to `out`, 64 MiB at a time."""
    block = byte * (64 << 20)
    for _ in range(16 * gib):
        out.write(block)


def _long_line(folder: Path) -> Path:
    logs = folder / "longline" / "logs"
    logs.mkdir(parents=True)
    with open(logs / "server.log", "wb") as out:
        out.write(b"[2026-06-18 21:00:00] before\n[2026-06-18 21:00:01] ")
        _write_run(out, b"x", 2)
        out.write(b"\n[2026-06-18 21:00:02] after\n")
    return folder / "longline"


def _record_bomb(folder: Path) -> Path:
    import zstandard

    journal = folder / "record" / "journal"
    journal.mkdir(parents=True)
    with open(journal / "h.export.zst", "wb") as raw, zstandard.ZstdCompressor(level=19).stream_writer(raw) as out:
        for i in range(3):
            out.write(b"__REALTIME_TIMESTAMP=178181800%d000000\n_HOSTNAME=h\nMESSAGE=entry %d\n\n" % (i, i))
        out.write(b"MESSAGE=")
        _write_run(out, b"a", 4)
        out.write(b"\n\n")
    return folder / "record"


def _big_entries(folder: Path) -> Path:
    journal = folder / "big" / "journal"
    journal.mkdir(parents=True)
    with open(journal / "h.export", "wb") as out:
        for i in range(2000):
            out.write(b"__REALTIME_TIMESTAMP=%d\n_HOSTNAME=h\nMESSAGE=%d " % (1781818000000000 + i * 1000000, i))
            out.write(b"x" * (1 << 20) + b"\n\n")
    return folder / "big"


def _ingest(label: str, bundle: Path, case: Path) -> tuple[Measurement, dict]:
    measured, _ = run(label, [FORENSICS, "ingest", str(bundle), "--case", str(case)])
    return measured, json.loads((case / "manifest.json").read_text())


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-bounded-") as scratch:
        folder = Path(scratch)
        rows = []
        bomb, manifest = _ingest("gzip of 4 GiB of newlines", _bomb(folder), folder / "case-bomb")
        (entry,) = manifest["inputs"]
        said = str(entry.get("notes")) + str(entry.get("error")) + str(entry.get("damage"))
        assert "decompression limit reached" in said and entry["parsed"] >= 1, entry
        rows.append((bomb, f"{entry['parsed']} sample kept; {said[said.find('decompression'):][:60]}…"))
        sparse, manifest = _ingest("a .tar.gz holding a sparse 40 GB log", sparse_tarball(folder), folder / "case-sparse")
        reasons = [s["reason"] for s in manifest["skipped"] if s["path"].endswith("huge.log")]
        assert reasons and "sparse" in reasons[0] and manifest["inputs"][0]["parsed"] == 1, manifest
        rows.append((sparse, "huge.log not unpacked; server.log read (1 record)"))
        line, manifest = _ingest("a server log with one 2 GB line", _long_line(folder), folder / "case-line")
        (entry,) = manifest["inputs"]
        assert (entry["parsed"], entry["quarantined"]) == (2, 1), entry
        rows.append((line, "2 records read, the 2 GB line quarantined with its length"))
        record_bomb = _record_bomb(folder)
        size = sum(f.stat().st_size for f in record_bomb.rglob("*.zst"))
        record, manifest = _ingest(f"a {size / 1e3:,.0f} KB zstd export: 3 entries, then 4 GiB without a blank line",
                                   record_bomb, folder / "case-record")
        (entry,) = manifest["inputs"]
        assert entry["parsed"] == 3 and "FORENSICS_MAX_RECORD" in (entry.get("error") or ""), entry
        rows.append((record, "the 3 entries; the input ended where the run passed FORENSICS_MAX_RECORD, and said so"))
        big, manifest = _ingest("a 2 GB export of 2,000 entries of 1 MiB each", _big_entries(folder), folder / "case-big")
        (entry,) = manifest["inputs"]
        assert (entry["parsed"], entry["quarantined"]) == (2000, 0) and "error" not in entry, entry
        rows.append((big, "all 2,000 entries (the file is memory-mapped: its 2 GB of pages count)"))
    print("\n## Bounded reads (`./run bench bounded_reads`)\n")
    print("| input | seconds | CPU s | peak RSS MiB | what the ingest kept |")
    print("|---|---:|---:|---:|---|")
    for m, kept in rows:
        print(f"| {m.label} | {m.seconds:.1f} | {m.cpu_seconds:.1f} | {m.peak_mib:,.0f} | {kept} |")


if __name__ == "__main__":
    main()
