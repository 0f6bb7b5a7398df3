"""A case in an object store against the same case on local disk, in one run: `forensics analyze`
(ingest, then the analysis) of a 64-host fleet (`forensics reference --hosts 64 --scale 10`, ~6.7 M
entries, generated once into bench/.cache/) with the case in a local folder, then in S3 — a real
SeaweedFS server on loopback (`forensics.lab.object_store`), so the network and the store's own
work are in the figure, not a remote link's latency. Both runs must find what scale 1 finds.

Prints seconds and peak RSS for each and their ratios (S3 / local disk).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from bench.fleet_scale import ANALYZE, REFERENCE, _bundle
from bench.measure import run

SCALE = int(os.environ.get("BENCH_OBJECT_STORE_SCALE", "10"))
HOSTS = int(os.environ.get("BENCH_OBJECT_STORE_HOSTS", "64"))


def _analyze(label: str, bundle: Path, case: str) -> tuple[float, float, dict]:
    measured, out = run(label, [sys.executable, "-c", ANALYZE, str(bundle), case, "local"])
    lines = out.strip().splitlines()
    return float(lines[-1]), measured.peak_mib, json.loads(lines[-2])


def main() -> None:
    from forensics.lab.object_store import seaweedfs_s3

    fleet = _bundle(f"reference-{HOSTS}hosts-x{SCALE}", hosts=HOSTS, scale=SCALE)
    with tempfile.TemporaryDirectory(prefix="forensics-bench-s3-") as scratch:
        local = _analyze("case on local disk", fleet, str(Path(scratch) / "case"))
        shutil.rmtree(Path(scratch) / "case", ignore_errors=True)
        with seaweedfs_s3(Path(scratch) / "seaweedfs", "cases"):  # the child inherits its AWS_* settings
            remote = _analyze("case in S3 (SeaweedFS on loopback)", fleet, "s3://cases/bench")
        expected = _analyze("reference incident (scale 1)", REFERENCE, str(Path(scratch) / "scale1"))[2]
    for label, (_, _, said) in (("local", local), ("s3", remote)):
        if said["key_times"] != expected["key_times"] or said["verdicts"] != expected["verdicts"]:
            raise SystemExit(f"{label}: found {said['key_times']} {said['verdicts']}, not what scale 1 finds")
    print(f"\n## A case in an object store ({os.cpu_count()} cores, {HOSTS} hosts × scale {SCALE})\n")
    print("| `forensics analyze`, case | entries | seconds | peak RSS MiB |")
    print("|---|---:|---:|---:|")
    for label, (seconds, peak, said) in (("on local disk", local), ("in S3 (SeaweedFS, loopback)", remote)):
        print(f"| {label} | {said['events']:,} | {seconds:.1f} | {peak:,.0f} |")
    print(f"\nS3 / local disk: {remote[0] / local[0]:.2f}× the time, {remote[1] / local[1]:.2f}× the peak memory; "
          f"both found decode frozen at {expected['started']} ({', '.join(expected['verdicts'])}).")
