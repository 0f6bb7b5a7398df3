"""A/B of `forensics analyze` between two commits, the way the step-by-step figures in
docs/benchmarks.md are measured: `python -m bench.ab BEFORE AFTER` (any two revisions git knows).

Each revision is exported with `git archive` into a folder of its own under bench/.cache/ab/ (the
working tree is not touched) and its C extensions are built there; then the two analyse the same
bundle — the reference incident at BENCH_REFERENCE_SCALE (default 100, ~1 M entries), written by
the current tree's generator — taking turns for BENCH_ROUNDS rounds (default 6; the first of each
round alternating), each run a whole process with a fresh case. Every run is checked to import the
revision's own package and to find the reference incident (decode froze at 21:34:47, TP_DESYNC).
Printed: each revision's median wall time, every run, median CPU-seconds and peak memory (the
process tree's), and the change.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from bench.analyze_reference import ANALYZE, CACHE, SCALE
from bench.analyze_reference import inputs as reference_inputs
from bench.measure import Measurement, median_of, run

ROOT = Path(__file__).resolve().parent.parent
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "6"))
# the package imported must be the revision's own, not the working tree's editable install
OWN_PACKAGE = """
import sys
import forensics
assert forensics.__file__.startswith(sys.argv.pop(3)), f"imported {forensics.__file__}, not the revision's package"
"""


def export(revision: str) -> tuple[str, Path]:
    """The revision's tree in bench/.cache/ab/<commit>, its C extensions built; (commit, folder)."""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", f"{revision}^{{commit}}"],
                            check=True, capture_output=True, text=True).stdout.strip()
    tree = CACHE / "ab" / commit[:12]
    if not (tree / ".built").exists():
        shutil.rmtree(tree, ignore_errors=True)
        tree.mkdir(parents=True)
        archive = subprocess.Popen(["git", "-C", str(ROOT), "archive", commit], stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", str(tree)], stdin=archive.stdout, check=True)
        if archive.wait() != 0:
            raise RuntimeError(f"git archive {commit} failed")
        subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tree, check=True,
                       capture_output=True)
        subprocess.run([sys.executable, "-m", "compileall", "-q", "forensics"], cwd=tree, check=True,
                       capture_output=True)  # as ./run does: no run pays for compiling the source
        (tree / ".built").write_text(commit)
    return commit, tree


def analyze(label: str, tree: Path, bundle: Path, case: Path) -> Measurement:
    """One whole `analyze` process of the revision in `tree`, checked."""
    shutil.rmtree(case, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    measured = run(label, [sys.executable, "-c", OWN_PACKAGE + ANALYZE, str(bundle), str(case), str(tree)], env=env,
                   cwd=str(tree))[0]  # the working tree's folder, first on sys.path as the current one, is not read
    shutil.rmtree(case, ignore_errors=True)
    return measured


def compare(before: str, after: str) -> dict[str, Measurement]:
    bundle, _, _, entries = reference_inputs()
    trees = {"before": export(before), "after": export(after)}
    runs: dict[str, list[Measurement]] = {"before": [], "after": []}
    for round_ in range(ROUNDS):
        for side in (("before", "after") if round_ % 2 == 0 else ("after", "before")):
            commit, tree = trees[side]
            runs[side].append(analyze(f"{side} ({commit[:7]})", tree, bundle, CACHE / f"ab-case-{side}"))
    medians = {side: median_of(measured) for side, measured in runs.items()}
    print(f"\n## A/B: forensics analyze, {before} -> {after}, reference at scale {SCALE} ({entries:,} entries), "
          f"{ROUNDS} alternating rounds, {os.cpu_count()} cores\n")
    print("| revision | median s | every run s | CPU s (median run) | peak RSS MiB (process tree) |")
    print("|---|---:|---|---:|---:|")
    for side, m in medians.items():
        every = " / ".join(f"{r.seconds:.2f}" for r in runs[side])
        print(f"| {m.label} | {m.seconds:.2f} | {every} | {m.cpu_seconds:.2f} | {m.peak_mib:,.0f} |")
    b, a = medians["before"], medians["after"]
    print(f"\nafter / before: {a.seconds / b.seconds:.3f} in wall time ({b.seconds:.2f} -> {a.seconds:.2f} s), "
          f"CPU {b.cpu_seconds:.2f} -> {a.cpu_seconds:.2f} s, peak {b.peak_mib:,.0f} -> {a.peak_mib:,.0f} MiB")
    return medians


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        raise SystemExit("usage: python -m bench.ab BEFORE AFTER  (two revisions; BENCH_ROUNDS, BENCH_REFERENCE_SCALE)")
    compare(*args)


if __name__ == "__main__":
    main()
