"""Fleet scale, in one run: the reference incident at 10 M journal entries analysed out of core
(partitioned case, streamed ingest, lean timeline) beside the in-memory timeline of the same
case; and a 64-host fleet analysed in this process at each scale asked for, the largest also through
a 2-worker Dask `LocalCluster`.

Inputs (generated once into bench/.cache/, seeds fixed): `forensics reference --scale 1000` (one
host, ~10 M entries) and `forensics reference --hosts 64 --scale 10` (~6.7 M entries on 64 hosts:
the incident on the first, traffic on the others; `BENCH_FLEET_SCALES=10,100` adds the
~67 M entries of scale 100, too many to make part of every run on 2 cores). Every run must find
what scale 1 finds — decode froze at 21:34:47, the TP desync verdict, the same key times — or the
benchmark fails.

Targets (issue 20): out of core at 10 M, peak RSS <= 3 GiB and wall time no worse than the
in-memory run, and within 10× the 1 M analysis (the reference at a tenth of the scale, analysed
in this same run just before: `BENCH_FLEET_BIG_SCALE` sets the larger, the smaller is a tenth of
it); through Dask, each worker within the same bound; cost per million entries about
constant as entries grow. Peak RSS is the process tree's (for Dask: the client with its workers,
and each worker's own high-water mark, read on the workers at the end); CPU-seconds are the tree's.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from bench.inputs import reference_bundle
from bench.measure import Measurement, run

CACHE = Path(__file__).resolve().parent / ".cache"
REFERENCE = Path(__file__).resolve().parent.parent / "data" / "incidents" / "dsv4-pd-wedge-2026-06-18"
BIG_SCALE = int(os.environ.get("BENCH_FLEET_BIG_SCALE", "1000"))
BASE_SCALE = max(BIG_SCALE // 10, 1)  # the "1 M" row: a tenth of the entries
GROWTH_TARGET = 10.0  # 10x the entries in at most 10x the time
FLEET_HOSTS = int(os.environ.get("BENCH_FLEET_HOSTS", "64"))
# the fleet at these scales in process (cost per million entries as entries grow), the last also on Dask
FLEET_SCALES = [int(x) for x in os.environ.get("BENCH_FLEET_SCALES", "10").split(",")]
MEMORY_TARGET_MIB = 3 * 1024

ANALYZE = """
import json, os, resource, sys, time
start = time.perf_counter()
bundle, case, how = sys.argv[1], sys.argv[2], sys.argv[3]
workers = {}
if how == "dask":
    from distributed import Client, LocalCluster
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                           memory_limit="4GiB", silence_logs=50)
    os.environ["FORENSICS_DASK"] = cluster.scheduler_address
from forensics.analyze import analyze
from forensics.detect.stacks import latest
result = analyze(bundle, case)
seconds = time.perf_counter() - start
if how == "dask":
    with Client(cluster.scheduler_address) as client:
        workers = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    cluster.close()
said = {"started": result.key_times.as_dict().get("started"), "key_times": result.key_times.as_dict(),
        "verdicts": sorted(f"{v.group}: {v.verdict}" for v in latest(result.verdicts)),
        "events": result.timeline.manifest["totals"]["events"], "lean": result.timeline.lean,
        "worker_peaks_kib": list(workers.values())}
print(json.dumps(said, default=str))
print(seconds)
"""


def _bundle(name: str, **kwargs: int) -> Path:
    return reference_bundle(CACHE / name, **kwargs)


def _analyze(label: str, bundle: Path, how: str, lean_above: str | None = None) -> tuple[Measurement, dict]:
    case = CACHE / f"fleet-case-{bundle.name}-{how}"
    shutil.rmtree(case, ignore_errors=True)
    if lean_above is not None:  # the child inherits it
        os.environ["FORENSICS_LEAN_ABOVE"] = lean_above
    try:
        measured, out = run(label, [sys.executable, "-c", ANALYZE, str(bundle), str(case), how])
    finally:
        os.environ.pop("FORENSICS_LEAN_ABOVE", None)
    lines = out.strip().splitlines()
    measured.seconds = float(lines[-1])
    said = json.loads(lines[-2])
    shutil.rmtree(case, ignore_errors=True)
    return measured, said


def main() -> None:
    rows: list[tuple[Measurement, dict]] = []
    scale1 = _analyze("reference incident, in process (scale 1)", REFERENCE, "local")
    rows.append(scale1)
    base = reference_bundle(CACHE / f"reference-x{BASE_SCALE}", CACHE / f"reference-x{BASE_SCALE}.json",
                            CACHE / f"reference-x{BASE_SCALE}-journal", scale=BASE_SCALE)  # analyze_reference's too
    rows.append(_analyze(f"scale {BASE_SCALE} (a tenth): in process", base, "local"))
    big = _bundle(f"reference-x{BIG_SCALE}", scale=BIG_SCALE)
    rows.append(_analyze(f"scale {BIG_SCALE}: out of core (lean timeline, the default)", big, "local"))
    rows.append(_analyze(f"scale {BIG_SCALE}: in-memory timeline (FORENSICS_LEAN_ABOVE=10^12)", big, "local", str(10**12)))
    for scale in FLEET_SCALES:
        fleet = _bundle(f"reference-{FLEET_HOSTS}hosts-x{scale}", hosts=FLEET_HOSTS, scale=scale)
        rows.append(_analyze(f"{FLEET_HOSTS} hosts × scale {scale}: in process", fleet, "local"))
    rows.append(_analyze(f"{FLEET_HOSTS} hosts × scale {scale}: 2-worker Dask LocalCluster", fleet, "dask"))

    expected = scale1[1]
    for measured, said in rows:
        if said["key_times"] != expected["key_times"] or said["verdicts"] != expected["verdicts"]:
            raise SystemExit(f"{measured.label}: found {said['key_times']} {said['verdicts']}, not what scale 1 "
                             f"finds ({expected['key_times']} {expected['verdicts']})")
    print(f"\n## Fleet scale ({os.cpu_count()} cores)\n")
    print("| what | entries | seconds | CPU s | s per M entries | peak RSS MiB | worker peaks MiB | timeline |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for m, said in rows:
        per_million = m.seconds / (said["events"] / 1e6)
        workers = " / ".join(f"{k / 1024:,.0f}" for k in said["worker_peaks_kib"]) or "—"
        print(f"| {m.label} | {said['events']:,} | {m.seconds:.1f} | {m.cpu_seconds:.1f} | {per_million:.1f} | "
              f"{m.peak_mib:,.0f} | {workers} | {'lean' if said['lean'] else 'full'} |")
    (one, one_said), (lean, lean_said), (full, _) = rows[1], rows[2], rows[3]
    growth, entries = lean.seconds / one.seconds, lean_said["events"] / one_said["events"]
    local, dask = rows[-2], rows[-1]
    print(f"\nall runs: decode froze at {expected['started']}, verdicts {', '.join(expected['verdicts'])}.")
    print(f"scale {BIG_SCALE} out of core: peak {lean.peak_mib:,.0f} MiB (target <= {MEMORY_TARGET_MIB:,}), "
          f"{full.peak_mib / lean.peak_mib:.1f}× less than in memory; {lean.seconds:.1f} s against "
          f"{full.seconds:.1f} s in memory ({lean.seconds / full.seconds:.2f}×).")
    worst = max(dask[1]["worker_peaks_kib"]) / 1024
    print(f"{FLEET_HOSTS} hosts × scale {FLEET_SCALES[-1]} through Dask: {dask[0].seconds:.1f} s against "
          f"{local[0].seconds:.1f} s in process; client peak {dask[0].peak_mib:,.0f} MiB, largest worker peak "
          f"{worst:,.0f} MiB (target <= {MEMORY_TARGET_MIB:,}).")
    print(f"{lean_said['events']:,} entries out of core against {one_said['events']:,} in this run: "
          f"{lean.seconds:.1f} s / {one.seconds:.2f} s = {growth:.1f}× the time for {entries:.1f}× the entries "
          f"(target <= {GROWTH_TARGET:g}×: {'met' if growth <= GROWTH_TARGET else 'NOT met'}).")
    single = lean.seconds / (lean_said["events"] / 1e6)
    costs = ", ".join(f"{m.seconds / (said['events'] / 1e6):.1f} s/M at {said['events'] / 1e6:.1f} M"
                      for m, said in rows[4:-1])
    print(f"cost per million entries: one host {single:.1f} s/M ({lean_said['events'] / 1e6:.1f} M); {FLEET_HOSTS} hosts in process {costs}.")
