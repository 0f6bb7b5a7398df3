"""Write the bundled sample bundle `data/incidents/sample-sglang/` deterministically.

Two hosts of an SGLang PD deployment: host 0 as a zstd-compressed `journalctl -o export`, host 1 as
`journalctl -o json` of a real journal file written by systemd-journal-remote, an export that
overlaps host 0's (the same records again), an export with damaged records for the quarantine,
and an unrelated note. Run from the repository root: `.venv/bin/python scripts/make_sample_bundle.py`.
"""

from __future__ import annotations

import gzip
import io
import shutil
import subprocess
import tempfile
from pathlib import Path

import zstandard

from forensics.lab.synth import entries, write_export_entry

BUNDLE = Path("data/incidents/sample-sglang")
JOURNAL_REMOTE = "/lib/systemd/systemd-journal-remote"

DAMAGED = (
    b"__REALTIME_TIMESTAMP=1781818100000000\n_HOSTNAME=gpu-node-00\nmessage=lower-case field name\n\n"
    b"_HOSTNAME=gpu-node-00\nMESSAGE=no timestamp at all\n\n"
    b"__REALTIME_TIMESTAMP=17818181OOOOOOOO\nMESSAGE=letter O for zero\n\n"
    b"__REALTIME_TIMESTAMP=1781818101000000\n_HOSTNAME=gpu-node-00\nMESSAGE=a good record among bad ones\n\n"
    b"__REALTIME_TIMESTAMP=1781818102000000\nMESSAGE=cut off mid-recor"
)


def main() -> None:
    shutil.rmtree(BUNDLE, ignore_errors=True)
    (BUNDLE / "journal").mkdir(parents=True)
    hosts: list[io.BytesIO] = [io.BytesIO(), io.BytesIO()]
    for n, fields in enumerate(entries(6000, hosts=2, seed=618)):
        write_export_entry(hosts[n % 2], fields)
    host0 = hosts[0].getvalue()
    (BUNDLE / "journal/gpu-node-00.export.zst").write_bytes(zstandard.ZstdCompressor(level=19).compress(host0))
    tail = host0[host0.index(b"\n\n", len(host0) * 9 // 10) + 2:]
    (BUNDLE / "journal/gpu-node-00.tail.export").write_bytes(tail)
    with tempfile.TemporaryDirectory() as tmp:
        export = Path(tmp) / "host1.export"
        export.write_bytes(hosts[1].getvalue())
        journal = Path(tmp) / "host1.journal"
        subprocess.run([JOURNAL_REMOTE, f"--output={journal}", str(export)], check=True, capture_output=True)
        as_json = subprocess.run(["journalctl", "--file", str(journal), "-o", "json"], check=True,
                                 capture_output=True).stdout
    with gzip.GzipFile(BUNDLE / "journal/gpu-node-01.json.gz", "wb", mtime=0) as out:
        out.write(as_json)
    (BUNDLE / "journal/damaged.export").write_bytes(DAMAGED)
    (BUNDLE / "notes.txt").write_text("Operator notes: copied journals off gpu-node-00 and gpu-node-01 at 21:45.\n")


if __name__ == "__main__":
    main()
