"""Run a command in a child process and report its wall time, CPU time and peak memory — the
command's whole process tree: what it starts (journalctl under the `.journal` reader, the
papermill kernel under a report, `sh`'s commands) is counted with it.

- Memory is sampled from /proc every 5 ms over the tree (each process's children read from
  /proc/PID/task/TID/children): the peak is the largest of the tree's summed resident memory in
  one sample and any one process's own high-water mark (VmHWM, which a sample between two
  5 ms reads cannot miss). getrusage's ru_maxrss is not used: across exec it keeps the forking
  Python parent's high-water mark, and for a tree it gives the largest process, not the sum.
  The private figure sums RssAnon (memory without the pages of memory-mapped input files).
- CPU time is user + system of the child and every descendant it waited for (`os.wait4`, i.e.
  RUSAGE_CHILDREN for this one child), so a command using two cores shows up to twice its wall time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass


@dataclass
class Measurement:
    """Seconds, CPU-seconds and peak RSS (MiB) of one child process and its descendants."""

    label: str
    seconds: float
    peak_mib: float
    note: str = ""
    peak_anon_mib: float = float("nan")  # heap and other private memory, without mapped files
    cpu_seconds: float = float("nan")  # user + system, the whole tree, the whole process (imports included)


def _memory_kib(pid: int) -> tuple[int, int, int]:
    """(VmHWM, VmRSS, RssAnon) of a running process in KiB; zeros once it is gone."""
    found = {"VmHWM:": 0, "VmRSS:": 0, "RssAnon:": 0}
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                key = line.split(maxsplit=1)[0]
                if key in found:
                    found[key] = int(line.split()[1])
    except OSError:
        pass
    return found["VmHWM:"], found["VmRSS:"], found["RssAnon:"]


def tree(pid: int) -> list[int]:
    """`pid` and every live descendant (children of any of its threads)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{current}/task/{task}/children") as children:
                    todo.extend(int(child) for child in children.read().split())
            except OSError:
                pass
    return found


class Sampler:
    """The peak memory of a process tree, sampled."""

    def __init__(self) -> None:
        self.peak_kib = self.peak_anon_kib = 0

    def sample(self, pid: int) -> None:
        rss = anon = 0
        for member in tree(pid):
            hwm, resident, private = _memory_kib(member)
            rss, anon = rss + resident, anon + private
            self.peak_kib = max(self.peak_kib, hwm)
        self.peak_kib, self.peak_anon_kib = max(self.peak_kib, rss), max(self.peak_anon_kib, anon)


def run(label: str, argv: list[str], *, note: str = "", env: dict[str, str] | None = None,
        cwd: str | None = None) -> tuple[Measurement, str]:
    """Time `argv` (wall and CPU, with its descendants) and sample its tree's peak RSS; also return
    what it printed. A failing command raises (its exit status is part of its answer)."""
    # Output goes to files, not pipes: a pipe nobody reads while we poll would stall the child.
    with tempfile.TemporaryFile() as out_file, tempfile.TemporaryFile() as err_file:
        start = time.perf_counter()
        child = subprocess.Popen(argv, stdout=out_file, stderr=err_file, env=env, cwd=cwd)
        sampler = Sampler()
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            sampler.sample(child.pid)
            time.sleep(0.005)
        seconds = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        out_file.seek(0)
        err_file.seek(0)
        out = out_file.read().decode(errors="replace")
        err = err_file.read().decode(errors="replace")
    if child.returncode != 0:
        raise RuntimeError(f"{label}: {' '.join(argv)} failed (exit status {child.returncode}): {err[-2000:]}")
    return Measurement(label, seconds, sampler.peak_kib / 1024, note, sampler.peak_anon_kib / 1024,
                       usage.ru_utime + usage.ru_stime), out


def python(label: str, code: str, *args: str, note: str = "") -> Measurement:
    """Run a Python snippet in a fresh interpreter; it prints its own timing (imports excluded)
    as the last word of its output. Its CPU time stays the whole process's (imports included)."""
    measured, out = run(label, [sys.executable, "-c", code, *args], note=note)
    measured.seconds = float(out.split()[-1])
    return measured


def python_out(label: str, code: str, *args: str, note: str = "") -> tuple[Measurement, str]:
    """`python`, also returning what the snippet printed (its answer, for the bench to check)."""
    measured, out = run(label, [sys.executable, "-c", code, *args], note=note)
    measured.seconds = float(out.split()[-1])
    return measured, out


def cores(m: Measurement) -> str:
    """CPU-seconds per wall second: how many cores the row kept busy on average."""
    return f"{m.cpu_seconds / m.seconds:.1f}" if m.seconds > 0 and m.cpu_seconds == m.cpu_seconds else ""


def median_of(runs: list[Measurement]) -> Measurement:
    """The run of median time among repeated runs of one thing, its note giving every run's time
    (this machine's speed drifts between runs, so one run says little on its own)."""
    ordered = sorted(runs, key=lambda m: m.seconds)
    middle = ordered[(len(ordered) - 1) // 2]
    times = " / ".join(f"{m.seconds:.2f}" for m in runs)
    note = "; ".join(n for n in (middle.note, f"median of {len(runs)} runs: {times} s" if len(runs) > 1 else "") if n)
    return Measurement(middle.label, middle.seconds, max(m.peak_mib for m in runs), note,
                       max(m.peak_anon_mib for m in runs), middle.cpu_seconds)
