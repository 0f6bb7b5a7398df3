"""Run a command in a child process and report its wall time and peak resident memory.

Peak memory is read from /proc/PID/status (VmHWM) while the child runs: unlike getrusage's
ru_maxrss, it is not inherited from the forking Python parent across exec.
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


def _hwm_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def run(label: str, argv: list[str], *, note: str = "") -> tuple[Measurement, str]:
    """Time `argv` (wall) and sample its peak RSS; also return what it printed.
    If it prints a last line ending in a number of seconds, that in-process time is used instead."""
    # Output goes to files, not pipes: a pipe nobody reads while we poll would stall the child.
    with tempfile.TemporaryFile() as out_file, tempfile.TemporaryFile() as err_file:
        start = time.perf_counter()
        child = subprocess.Popen(argv, stdout=out_file, stderr=err_file)
        peak = 0
        while child.poll() is None:
            peak = max(peak, _hwm_kib(child.pid) or 0)
            time.sleep(0.005)
        seconds = time.perf_counter() - start
        out_file.seek(0)
        err_file.seek(0)
        out = out_file.read().decode(errors="replace")
        err = err_file.read().decode(errors="replace")
    if child.returncode != 0:
        raise RuntimeError(f"{label}: {' '.join(argv)} failed: {err[-2000:]}")
    return Measurement(label, seconds, peak / 1024, note), out


def python(label: str, code: str, *args: str, note: str = "") -> Measurement:
    """Run a Python snippet in a fresh interpreter; it prints its own timing (imports excluded)
    as the last word of its output."""
    measured, out = run(label, [sys.executable, "-c", code, *args], note=note)
    measured.seconds = float(out.split()[-1])
    return measured
