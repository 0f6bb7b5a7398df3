"""A case in an object store against the same case on local disk, in one run: `forensics analyze`
(ingest, then the analysis) of a 64-host fleet (`forensics reference --hosts 64 --scale 10`, ~6.7 M
entries, generated once into bench/.cache/) with the case in a local folder, then in S3 — a real
SeaweedFS server on loopback (`forensics.lab.object_store`), so the network and the store's own
work are in the figure, not a remote link's latency. Every run must find what scale 1 finds.

The two take turns for BENCH_ROUNDS rounds (default 3; the first of each round alternates, and
each run writes a case of its own), so a drift in this machine's speed reaches both; prints the
median, the spread (fastest–slowest) and every run for each, and the ratio of the medians.
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
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
HOSTS = int(os.environ.get("BENCH_OBJECT_STORE_HOSTS", "64"))


def _analyze(label: str, bundle: Path, case: str) -> tuple[float, float, dict]:
    measured, out = run(label, [sys.executable, "-c", ANALYZE, str(bundle), case, "local"])
    lines = out.strip().splitlines()
    return float(lines[-1]), measured.peak_mib, json.loads(lines[-2])


def main() -> None:
    from statistics import median

    from forensics.lab.object_store import seaweedfs_s3

    fleet = _bundle(f"reference-{HOSTS}hosts-x{SCALE}", hosts=HOSTS, scale=SCALE)
    runs: dict[str, list[tuple[float, float, dict]]] = {"local": [], "s3": []}
    with tempfile.TemporaryDirectory(prefix="forensics-bench-s3-") as scratch:
        expected = _analyze("reference incident (scale 1)", REFERENCE, str(Path(scratch) / "scale1"))[2]
        with seaweedfs_s3(Path(scratch) / "seaweedfs", "cases"):  # the child inherits its AWS_* settings
            for round_ in range(ROUNDS):
                order = ("local", "s3") if round_ % 2 == 0 else ("s3", "local")
                for where in order:
                    case = (str(Path(scratch) / f"case-{round_}") if where == "local" else f"s3://cases/bench-{round_}")
                    runs[where].append(_analyze(f"case {where}, round {round_ + 1}", fleet, case))
                shutil.rmtree(Path(scratch) / f"case-{round_}", ignore_errors=True)
    for where, measured in runs.items():
        for _, _, said in measured:
            if said["key_times"] != expected["key_times"] or said["verdicts"] != expected["verdicts"]:
                raise SystemExit(f"{where}: found {said['key_times']} {said['verdicts']}, not what scale 1 finds")
    print(f"\n## A case in an object store ({os.cpu_count()} cores, {HOSTS} hosts × scale {SCALE}, "
          f"{ROUNDS} alternating rounds)\n")
    print("| `forensics analyze`, case | entries | median s | spread s | every run s | peak RSS MiB |")
    print("|---|---:|---:|---:|---|---:|")
    medians = {}
    for where, label in (("local", "on local disk"), ("s3", "in S3 (SeaweedFS, loopback)")):
        seconds = [m[0] for m in runs[where]]
        medians[where] = median(seconds), max(m[1] for m in runs[where])
        print(f"| {label} | {runs[where][0][2]['events']:,} | {medians[where][0]:.1f} | "
              f"{min(seconds):.1f}–{max(seconds):.1f} | {' / '.join(f'{x:.1f}' for x in seconds)} | "
              f"{medians[where][1]:,.0f} |")
    print(f"\nS3 / local disk: {medians['s3'][0] / medians['local'][0]:.2f}× the median time, "
          f"{medians['s3'][1] / medians['local'][1]:.2f}× the peak memory; every run found decode frozen at "
          f"{expected['started']} ({', '.join(expected['verdicts'])}).")
