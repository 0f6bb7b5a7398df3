"""Run a command in a child process and report its wall time and peak resident memory.

Peak memory is read from /proc/PID/status while the child runs: VmHWM (unlike getrusage's
ru_maxrss, not inherited from the forking Python parent across exec) and the largest RssAnon seen
(sampled every 5 ms: private memory without the pages of memory-mapped input files).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass


@dataclass
class Measurement:
    """Seconds and peak RSS (MiB) of one child process."""

    label: str
    seconds: float
    peak_mib: float
    note: str = ""
    peak_anon_mib: float = float("nan")  # heap and other private memory, without mapped files


def _memory_kib(pid: int) -> tuple[int, int]:
    """(VmHWM, RssAnon) of a running process in KiB; zeros once it is gone."""
    found = {"VmHWM:": 0, "RssAnon:": 0}
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                key = line.split(maxsplit=1)[0]
                if key in found:
                    found[key] = int(line.split()[1])
    except OSError:
        pass
    return found["VmHWM:"], found["RssAnon:"]


def run(label: str, argv: list[str], *, note: str = "") -> tuple[Measurement, str]:
    """Time `argv` (wall) and sample its peak RSS; also return what it printed.
    If it prints a last line ending in a number of seconds, that in-process time is used instead."""
    # Output goes to files, not pipes: a pipe nobody reads while we poll would stall the child.
    with tempfile.TemporaryFile() as out_file, tempfile.TemporaryFile() as err_file:
        start = time.perf_counter()
        child = subprocess.Popen(argv, stdout=out_file, stderr=err_file)
        peak = peak_anon = 0
        while child.poll() is None:
            hwm, anon = _memory_kib(child.pid)
            peak, peak_anon = max(peak, hwm), max(peak_anon, anon)
            time.sleep(0.005)
        seconds = time.perf_counter() - start
        out_file.seek(0)
        err_file.seek(0)
        out = out_file.read().decode(errors="replace")
        err = err_file.read().decode(errors="replace")
    if child.returncode != 0:
        raise RuntimeError(f"{label}: {' '.join(argv)} failed: {err[-2000:]}")
    return Measurement(label, seconds, peak / 1024, note, peak_anon / 1024), out


def python(label: str, code: str, *args: str, note: str = "") -> Measurement:
    """Run a Python snippet in a fresh interpreter; it prints its own timing (imports excluded)
    as the last word of its output."""
    measured, out = run(label, [sys.executable, "-c", code, *args], note=note)
    measured.seconds = float(out.split()[-1])
    return measured


def median_of(runs: list[Measurement]) -> Measurement:
    """The run of median time among repeated runs of one thing, its note giving every run's time
    (this machine's speed drifts between runs, so one run says little on its own)."""
    ordered = sorted(runs, key=lambda m: m.seconds)
    middle = ordered[(len(ordered) - 1) // 2]
    times = " / ".join(f"{m.seconds:.2f}" for m in runs)
    note = "; ".join(n for n in (middle.note, f"median of {len(runs)} runs: {times} s" if len(runs) > 1 else "") if n)
    return Measurement(middle.label, middle.seconds, max(m.peak_mib for m in runs), note,
                       max(m.peak_anon_mib for m in runs))

