"""How long the `forensics` command takes to exit once its work is done, beside the interpreter's
ordinary exit, in the same run: `forensics analyze --brief` of the reference bundle (the console
script, which exits without taking every module and object apart: `forensics.cli.console`) and the
same `main` called under `python -c` and left to `sys.exit` (what the command did before), in
turns, `BENCH_ROUNDS` times.

What is timed from outside, for each run: the whole command, and its tail — from the last bytes it
wrote to stdout (a pipe: Python writes its buffer out when it flushes at exit) to the end of the
process. Every run is checked to exit 0 and to print the reference incident's verdict (decode froze
at 21:34:47, TP_DESYNC), so a command that failed early cannot pass for a fast one."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.inputs import CACHE, reference_bundle

SCALE = int(os.environ.get("BENCH_REFERENCE_SCALE", "100"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
FORENSICS = Path(sys.executable).parent / "forensics"
# `main` as the command ran it before `console`: the interpreter's ordinary exit after it
ORDINARY = "import sys; from forensics.cli import main; sys.exit(main(sys.argv[1:]))"
VERDICT = ("decode froze at 21:34:47", "TP_DESYNC")


def tail_timed(command: list[str]) -> tuple[float, float]:
    """Wall seconds of `command`, and of its tail: from its last bytes on stdout to its end. The
    run is checked to exit 0 and to print the reference verdict."""
    with tempfile.TemporaryFile() as errors:
        start = time.perf_counter()
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors)
        assert child.stdout is not None
        out, last = b"", start
        while chunk := os.read(child.stdout.fileno(), 1 << 16):
            out, last = out + chunk, time.perf_counter()
        status = child.wait()
        end = time.perf_counter()
        errors.seek(0)
        said = out.decode(errors="replace")
        if status != 0 or not all(words in said for words in VERDICT):
            raise RuntimeError(f"{' '.join(command)}: exit status {status}, printed {said[:300]!r}: not the work "
                               f"timed\n{errors.read()[-1000:].decode(errors='replace')}")
    return end - start, end - last


def main() -> None:
    bundle = reference_bundle(CACHE / f"reference-x{SCALE}", scale=SCALE)
    with tempfile.TemporaryDirectory(prefix="bench-cli-exit-") as scratch:
        arguments = ["analyze", str(bundle), "--case", str(Path(scratch) / "case"), "--brief"]
        commands = {"forensics analyze --brief (the console script: exits without the teardown)":
                    [str(FORENSICS), *arguments],
                    "the same main under python -c, then sys.exit (the interpreter's ordinary exit)":
                    [sys.executable, "-c", ORDINARY, *arguments]}
        runs: dict[str, list[tuple[float, float]]] = {label: [] for label in commands}
        for _ in range(ROUNDS):
            for label, command in commands.items():
                runs[label].append(tail_timed(command))
    print(f"\n## cli_exit ({ROUNDS} rounds in turns; every run's exit status and verdict checked)\n\n"
          "| what | whole command, s (median) | last output to exit, s (median) | every run's tail, s |\n"
          "|---|---:|---:|---|")
    for label, timed in runs.items():
        tails = [tail for _, tail in timed]
        print(f"| {label} | {statistics.median(w for w, _ in timed):.2f} | {statistics.median(tails):.3f} | "
              + " / ".join(f"{t:.3f}" for t in tails) + " |")


if __name__ == "__main__":
    main()
