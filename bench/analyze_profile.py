"""Where the seconds of `forensics analyze` go on the reference incident at 1 M journal entries
(the same bundle as `analyze_reference`), so that speed work is chosen by measurement.

Two views of one bundle, each from a fresh case:
- phases, timed in-process by wrapping the stage functions: imports, then ingest (decompress,
  scan, assembly into events, writing each host folder from the rows held in memory, or parts and
  their merge for rows past that — summed over the threads that run them, so they overlap and
  exceed ingest's wall time), timeline (classify the held rows), and the detectors; beside each,
  its CPU-seconds (the running thread's own for ingest's parts: waiting for a core or the GIL is
  not counted, as busy wall time counts it), and the analysis's CPU-seconds per million entries;
- a py-spy sample of the whole process across all its threads (`py-spy record --threads --idle`,
  raw output kept in bench/.cache/analyze-profile.txt), the forensics functions that the most
  samples were in.
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from bench.analyze_reference import CACHE
from bench.analyze_reference import inputs as reference_inputs

PHASES = r'''
import sys, threading, time, collections, json
start = time.perf_counter()
import forensics.analyze as A
import forensics.case.build as B
import forensics.case.store as S
import forensics.sources.common.rawio as R
import forensics.sources.journal.journal_export as J
imports = time.perf_counter() - start
busy = collections.defaultdict(float)
cpu = collections.defaultdict(float)
walls = {}
lock = threading.Lock()

def wrap(module, name, key, into, clock):
    """Time every call of module.name into into[key] (summed: over threads too), and its CPU
    seconds by `clock` into cpu[key]: the calling thread's own (time.thread_time) for the parts of
    ingest, which run on several threads at once; the whole process's for the phases, which run
    one after another."""
    original = getattr(module, name)
    def timed(*args, **kwargs):
        began, began_cpu = time.perf_counter(), clock()
        try:
            return original(*args, **kwargs)
        finally:
            with lock:
                into[key] = into.get(key, 0.0) + time.perf_counter() - began
                cpu[key] += clock() - began_cpu
    setattr(module, name, timed)

summed = lambda module, name, key: wrap(module, name, key, busy, time.thread_time)
walled = lambda module, name, key: wrap(module, name, key, walls, time.process_time)

summed(R._Decompressing, "readinto", "decompress")
summed(J, "_parse_chunk", "scan (journal pieces)")
summed(J, "assemble_events", "assemble events (journal pieces)")
summed(B, "finish_held", "write each host folder once (rows held in memory)")
summed(B, "write_part", "write parts (rows past the memory held)")
summed(B, "finish_partition", "merge parts into one file per host folder")
walled(A, "ingest", "ingest")
walled(A, "build_timeline", "timeline: classify")
walled(A, "run_detectors", "detectors")  # every registered detector, in its one loop
began, began_cpu = time.perf_counter(), time.process_time()
result = A.analyze(sys.argv[1], sys.argv[2])
total, total_cpu = time.perf_counter() - began, time.process_time() - began_cpu
assert result.key_times.started.strftime("%H:%M:%S") == "21:34:47", result.key_times
print(json.dumps({"imports": imports, "analyze": total, "analyze_cpu": total_cpu, "walls": walls, "busy": dict(busy),
                  "cpu": dict(cpu)}))
'''

WAITING = re.compile(r"^(Condition\.wait|Event\.wait|Thread\.join|_wait_for_tstate_lock|Queue\.(get|put)|"
                     r"select|sleep|acquire) \(")

PLAIN = """
import sys
from forensics.analyze import analyze
result = analyze(sys.argv[1], sys.argv[2])
assert result.key_times.started.strftime("%H:%M:%S") == "21:34:47"
"""


def _fresh(case: Path) -> str:
    shutil.rmtree(case, ignore_errors=True)
    return str(case)


def main() -> None:
    import json

    bundle, _, _, entries = reference_inputs()
    case = CACHE / "profile-case"
    done = subprocess.run([sys.executable, "-c", PHASES, str(bundle), _fresh(case)], capture_output=True, text=True,
                          check=True)
    said = json.loads(done.stdout.strip().splitlines()[-1])
    walls, busy, cpu = said["walls"], said["busy"], said["cpu"]
    print(f"\n## Where `forensics analyze` spends its time: {entries:,} journal entries, {os.cpu_count()} cores\n")
    print("| phase | wall s | busy s (summed over threads) | CPU s |")
    print("|---|---:|---:|---:|")
    print(f"| imports | {said['imports']:.2f} | | |")
    print(f"| ingest | {walls['ingest']:.2f} | | {cpu['ingest']:.2f} |")
    for key in ("decompress", "scan (journal pieces)", "assemble events (journal pieces)",
                "write each host folder once (rows held in memory)", "write parts (rows past the memory held)",
                "merge parts into one file per host folder"):
        print(f"| &nbsp;&nbsp;{key} | | {busy.get(key, 0.0):.2f} | {cpu.get(key, 0.0):.2f} |")
    for key, label in (("timeline: classify", "timeline: classify"),
                       ("detectors", "detectors (all, stacks and key times included)")):
        print(f"| {label} | {walls[key]:.2f} | | {cpu[key]:.2f} |")
    rest = said["analyze"] - walls["ingest"] - walls["timeline: classify"] - walls["detectors"]
    rest_cpu = said["analyze_cpu"] - cpu["ingest"] - cpu["timeline: classify"] - cpu["detectors"]
    print(f"| the rest (profile choice, incident, tracks) | {rest:.2f} | | {rest_cpu:.2f} |")
    print(f"| **analyze, in process** | **{said['analyze']:.2f}** | | **{said['analyze_cpu']:.2f}** |")
    print(f"\nCPU-seconds per million entries: {said['analyze_cpu'] / entries * 1e6:.2f}")
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        print("\n(py-spy not installed: no sampled profile)")
        return
    raw = CACHE / "analyze-profile.txt"
    subprocess.run([spy, "record", "-o", str(raw), "-f", "raw", "-r", "200", "--threads", "--idle", "--nonblocking",
                    "--", sys.executable, "-c", PLAIN, str(bundle), _fresh(case)], check=True, capture_output=True)
    samples: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, count = line.rsplit(" ", 1)
        frames = stack.split(";")
        if WAITING.search(frames[-1]):  # a thread waiting for another (a future, a queue, a lock): not work
            continue
        total += int(count)
        ours = [f for f in frames if "forensics/" in f]
        if ours:
            samples[re.sub(r":\d+\)$", ")", ours[-1])] += int(count)
    print(f"\npy-spy, every thread, 200 Hz: {total:,} samples; the innermost forensics function of each "
          f"(raw samples in {raw.relative_to(CACHE.parent.parent)}):\n")
    print("| function | samples | share |")
    print("|---|---:|---:|")
    for name, count in samples.most_common(12):
        print(f"| `{name}` | {count:,} | {count / max(total, 1):.0%} |")
