"""Hostile inputs at full size, each ingested by `forensics ingest` in a fresh process: peak memory
against the documented bounds, and what the ingest kept and said.

- a gzip of 4 GiB of newlines after one sample (about 4 MB compressed): read up to the
  decompression limit (100 × the compressed size, at most 2 GiB), then stopped with its reason;
- a .tar.gz of a few KB holding a sparse 40 GB server log beside a real one: the huge member is
  not unpacked (over FORENSICS_MAX_UNPACKED, 8 GiB), the real one is read;
- a server log holding one 2 GB line between two ordinary ones: the line is quarantined with its
  length (over FORENSICS_MAX_LINE, 1 MiB), the others read.

Each run here checks its own work (the manifest's counts and reasons), so a run that read nothing
cannot pass for a fast one.
"""

from __future__ import annotations

import gzip
import json
import sys
import tempfile
from pathlib import Path

from bench.measure import Measurement, run
from forensics.lab.synth import sparse_tarball

FORENSICS = str(Path(sys.executable).parent / "forensics")


def _bomb(folder: Path) -> Path:
    metrics = folder / "bomb" / "metrics"
    metrics.mkdir(parents=True)
    with gzip.open(metrics / "scrapes.prom.gz", "wb", compresslevel=9) as out:
        out.write(b"sglang:num_running_reqs 1\n")
        block = b"\n" * (64 << 20)
        for _ in range(64):  # 4 GiB
            out.write(block)
    return folder / "bomb"


def _long_line(folder: Path) -> Path:
    logs = folder / "longline" / "logs"
    logs.mkdir(parents=True)
    with open(logs / "server.log", "wb") as out:
        out.write(b"[2026-06-18 21:00:00] before\n[2026-06-18 21:00:01] ")
        block = b"x" * (64 << 20)
        for _ in range(32):  # 2 GiB
            out.write(block)
        out.write(b"\n[2026-06-18 21:00:02] after\n")
    return folder / "longline"


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
    print("\n## Bounded reads (`./run bench bounded_reads`)\n")
    print("| input | seconds | CPU s | peak RSS MiB | what the ingest kept |")
    print("|---|---:|---:|---:|---|")
    for m, kept in rows:
        print(f"| {m.label} | {m.seconds:.1f} | {m.cpu_seconds:.1f} | {m.peak_mib:,.0f} | {kept} |")


if __name__ == "__main__":
    main()
