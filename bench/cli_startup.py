"""How fast the `forensics` command answers `--help` and a bad argument, beside the interpreter
starting and doing nothing (`python -c pass`), in the same run: the command imports the data stack
only where a command needs it. Target: ≤ 0.3 s."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

FORENSICS = Path(sys.executable).parent / "forensics"
ROUNDS = 7


def _seconds(command: list[str]) -> float:
    times = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        subprocess.run(command, capture_output=True, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    rows = [("python -c pass", _seconds([sys.executable, "-c", "pass"])),
            ("forensics --help", _seconds([str(FORENSICS), "--help"])),
            ("forensics analyze (missing argument)", _seconds([str(FORENSICS), "analyze"])),
            ("python -c 'import polars' (what it no longer pays)", _seconds([sys.executable, "-c", "import polars"]))]
    base = rows[0][1]
    print(f"\n## cli_startup (median of {ROUNDS})\n\n| what | seconds | beside python -c pass |\n|---|---:|---:|")
    for label, seconds in rows:
        print(f"| {label} | {seconds:.3f} | {seconds / base:.1f}× |")
    worst = max(seconds for label, seconds in rows[1:3])
    print(f"\ntarget ≤ 0.3 s: {'met' if worst <= 0.3 else 'NOT met'} ({worst:.3f} s)")


if __name__ == "__main__":
    main()
