"""Where the seconds of `forensics analyze` go on the reference incident at 1 M journal entries
(the same bundle as `analyze_reference`), so that speed work is chosen by measurement.

Two views of one bundle, each from a fresh case:
- phases, timed in-process by wrapping the stage functions: imports, then ingest (decompress,
  scan + assemble, writing each host folder from the rows held in memory, or parts and their
  merge for rows past that — summed over the threads that run them, so they overlap and exceed
  ingest's wall time), timeline (classify the held rows), and the detectors;
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
walls = {}
lock = threading.Lock()

def wrap(module, name, key, into):
    """Time every call of module.name into into[key] (summed: over threads too)."""
    original = getattr(module, name)
    def timed(*args, **kwargs):
        began = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            with lock:
                into[key] = into.get(key, 0.0) + time.perf_counter() - began
    setattr(module, name, timed)

summed = lambda module, name, key: wrap(module, name, key, busy)
walled = lambda module, name, key: wrap(module, name, key, walls)

summed(R._Decompressing, "readinto", "decompress")
summed(J, "_read_piece", "scan + assemble (journal pieces)")
summed(B, "finish_held", "write each host folder once (rows held in memory)")
summed(B, "write_part", "write parts (rows past the memory held)")
summed(B, "finish_partition", "merge parts into one file per host folder")
walled(A, "ingest", "ingest")
walled(A, "build_timeline", "timeline: classify")
walled(A, "run_detectors", "detectors")  # every registered detector, in its one loop
began = time.perf_counter()
result = A.analyze(sys.argv[1], sys.argv[2])
total = time.perf_counter() - began
assert result.key_times.started.strftime("%H:%M:%S") == "21:34:47", result.key_times
print(json.dumps({"imports": imports, "analyze": total, "walls": walls, "busy": dict(busy)}))
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
    walls, busy = said["walls"], said["busy"]
    print(f"\n## Where `forensics analyze` spends its time: {entries:,} journal entries, {os.cpu_count()} cores\n")
    print("| phase | wall s | busy s (summed over threads) |")
    print("|---|---:|---:|")
    print(f"| imports | {said['imports']:.2f} | |")
    print(f"| ingest | {walls['ingest']:.2f} | |")
    for key in ("decompress", "scan + assemble (journal pieces)", "write each host folder once (rows held in memory)",
                "write parts (rows past the memory held)", "merge parts into one file per host folder"):
        print(f"| &nbsp;&nbsp;{key} | | {busy.get(key, 0.0):.2f} |")
    print(f"| timeline: classify | {walls['timeline: classify']:.2f} | |")
    print(f"| detectors (all, stacks and key times included) | {walls['detectors']:.2f} | |")
    rest = said["analyze"] - walls["ingest"] - walls["timeline: classify"] - walls["detectors"]
    print(f"| the rest (profile choice, incident, tracks) | {rest:.2f} | |")
    print(f"| **analyze, in process** | **{said['analyze']:.2f}** | |")
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
