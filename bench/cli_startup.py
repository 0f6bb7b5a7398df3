"""How fast the `forensics` command answers `--help` and a bad argument, beside the interpreter
starting and doing nothing (`python -c pass`), in the same run: the command imports the data stack
only where a command needs it. Every run's answer is checked — its exit status and what it printed —
so a command that failed early cannot pass for a fast one. Target: ≤ 0.3 s."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

FORENSICS = Path(sys.executable).parent / "forensics"
ROUNDS = int(os.environ.get("BENCH_CLI_ROUNDS", "7"))


def timed(command: list[str], status: int, says: str = "", rounds: int = ROUNDS) -> float:
    """The median wall time of `command` over `rounds` runs, each checked to end with exit status
    `status` and to print `says` (on stdout or stderr)."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - start)
        if done.returncode != status or says not in done.stdout + done.stderr:
            raise RuntimeError(f"{' '.join(command)}: exit status {done.returncode} (expected {status}), "
                               f"{'printed' if says in done.stdout + done.stderr else 'did not print'} {says!r}: "
                               f"not the work timed\n{done.stderr[-1000:]}")
    return statistics.median(times)


def main() -> None:
    rows = [("python -c pass", timed([sys.executable, "-c", "pass"], 0)),
            ("forensics --help", timed([str(FORENSICS), "--help"], 0, "usage: forensics")),
            ("forensics analyze (missing argument)",
             timed([str(FORENSICS), "analyze"], 2, "the following arguments are required: bundle")),
            ("python -c 'import polars' (what the command does not import to start)", timed([sys.executable, "-c", "import polars"], 0))]
    base = rows[0][1]
    print(f"\n## cli_startup (median of {ROUNDS}; each run's exit status and output checked)\n\n"
          "| what | seconds | beside python -c pass |\n|---|---:|---:|")
    for label, seconds in rows:
        print(f"| {label} | {seconds:.3f} | {seconds / base:.1f}× |")
    worst = max(seconds for label, seconds in rows[1:3])
    print(f"\ntarget ≤ 0.3 s: {'met' if worst <= 0.3 else 'NOT met'} ({worst:.3f} s)")


if __name__ == "__main__":
    main()
