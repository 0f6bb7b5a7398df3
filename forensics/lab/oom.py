"""The kernel's OOM killer, for real: a Python process that outgrows a memory cgroup's limit.

    python -m forensics.lab.oom OUT [--limit-mib 64] [--host gpu-node-00]

makes a memory cgroup under this process' own (cgroup v2 `memory.max`, or v1
`memory.limit_in_bytes`), starts `python3` in it allocating four times the limit, lets the kernel
kill it, removes the cgroup, and writes a bundle folder OUT with `logs/<host>/dmesg.txt`: the kernel
ring buffer's lines from the run, as `dmesg -T` prints them (the OOM report and its
`Memory cgroup out of memory: Killed process N (python3)`). Needs root, a writable cgroup
file system and a readable ring buffer; `LabError` says which is missing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from forensics.lab import LabError

CGROUP_ROOT = Path("/sys/fs/cgroup")
HOG = "x = bytearray({size}); print(len(x))"  # touches every byte: the pages are charged to the cgroup



def _own_memory_cgroup() -> tuple[Path, str]:
    """This process' memory cgroup folder and the file that limits it (v2 unified, else v1 memory)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        number, controllers, path = line.split(":", 2)
        if number == "0" and (CGROUP_ROOT / "cgroup.controllers").exists():
            return CGROUP_ROOT / path.lstrip("/"), "memory.max"
        if "memory" in controllers.split(","):
            return CGROUP_ROOT / "memory" / path.lstrip("/"), "memory.limit_in_bytes"
    raise LabError("no memory cgroup for this process (/proc/self/cgroup names none)")


def _kernel_lines() -> list[str]:
    done = subprocess.run(["dmesg", "-T"], capture_output=True, text=True, check=False)
    if done.returncode != 0 or shutil.which("dmesg") is None:
        raise LabError(f"the kernel's ring buffer cannot be read (dmesg -T: {done.stderr.strip()[:200]})")
    return done.stdout.splitlines()


def run(out: Path, limit_mib: int = 64, host: str = "gpu-node-00") -> tuple[Path, int]:
    """Run the process into its limit; returns the bundle folder and the pid the kernel killed."""
    parent, limit_file = _own_memory_cgroup()
    group = parent / f"forensics-oom-{os.getpid()}"
    try:
        group.mkdir()
        (group / limit_file).write_text(str(limit_mib * 1024 * 1024))
    except OSError as error:
        raise LabError(f"cannot make a memory-limited cgroup at {group}: {error}") from None
    try:
        # the child joins the cgroup before it starts Python, so every page it touches is charged there
        hog = HOG.format(size=limit_mib * 4 * 1024 * 1024)
        process = subprocess.Popen(["sh", "-c", f'echo $$ > "{group}/cgroup.procs" && exec "{sys.executable}" -c '
                                                f'"{hog}"'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        process.wait(timeout=120)
        if process.returncode != -9 and process.returncode != 137:
            raise LabError(f"the process was not killed by the kernel (exit status {process.returncode})")
    finally:
        for _ in range(50):  # the cgroup can be removed once the kernel has reaped its last task
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)
    lines = _kernel_lines()
    killed = [i for i, line in enumerate(lines) if f"Killed process {process.pid} " in line]
    if not killed:
        raise LabError(f"the kernel log holds no OOM kill of pid {process.pid}")
    # the kernel's whole report of this kill: from its `invoked oom-killer` line to the kill
    start = max((i for i in range(killed[-1] + 1) if "invoked oom-killer" in lines[i]), default=killed[-1])
    lines = lines[start:killed[-1] + 1]
    log = out / "logs" / host / "dmesg.txt"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("\n".join(lines) + "\n")
    return out, process.pid


def main(argv: list[str] | None = None) -> int:
    """The command line above."""
    parser = argparse.ArgumentParser(prog="python -m forensics.lab.oom", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--limit-mib", type=int, default=64)
    parser.add_argument("--host", default="gpu-node-00")
    args = parser.parse_args(argv)
    bundle, pid = run(args.out, args.limit_mib, args.host)
    print(f"{bundle} (pid {pid} killed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
