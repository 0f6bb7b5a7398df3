"""Journald ingestion: 1,000,000 SGLang-shaped entries, each input format read by forensics beside
a usual tool that reads the same format, in one run.

Like for like: every row is a whole process tree (interpreter start and imports included; cold, the
page cache warm for every input alike; CPU-seconds and peak memory count the processes it starts),
each forensics row paired with a peer reading the same input and checked to give the same count:
- .journal: forensics' .journal loader (each file's export written by its own C reader into the C
  scanner; journalctl, a child counted with it, only where a file is not ordinary) /
  python-systemd's bare `Reader` iteration (which builds no frame at all);
- JSON: forensics' JSON loader / lnav indexing the JSON and counting its entries.
The export has no peer doing the same work (systemd-journal-remote, which makes the `.journal`
input here, writes an indexed journal: other work), so its row stands alone.
Then the case: ingest (export -> Parquet case, cold) and load_case + a query on the built case
(warm: the work a notebook does once the case exists). Every row checks the entries it read or
wrote against the input's count. Inputs are generated once into bench/.cache/ (deterministic, seed 0).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.measure import Measurement, cores, python, run

ENTRIES = int(os.environ.get("BENCH_JOURNAL_ENTRIES", "1000000"))
CACHE = Path(__file__).resolve().parent / ".cache"
JOURNAL_REMOTE = "/lib/systemd/systemd-journal-remote"

LOAD = """
import sys, time
from pathlib import Path
from forensics.sources import get
source = get(sys.argv[1])
start = time.perf_counter()
result = source.parse(Path(sys.argv[2]))
assert result.rows.height + result.quarantine.height == result.records
assert result.rows.height == int(sys.argv[3]), f"read {result.rows.height:,} entries of {sys.argv[3]}: not the work timed"
print("read", result.rows.height, "entries")
"""

INGEST = """
import sys, time
from forensics import ingest
start = time.perf_counter()
manifest = ingest(sys.argv[1], sys.argv[2])
assert manifest["totals"]["events"] == int(sys.argv[3]), f"ingested {manifest['totals']['events']:,} of {sys.argv[3]}"
print("ingested", manifest["totals"]["events"], "entries")
"""

OPEN_CASE = """
import sys, time
import polars as pl
from forensics import load_case
start = time.perf_counter()
case = load_case(sys.argv[1])
last = (case.events.group_by("host", "unit").agg(pl.col("ts").max(), pl.len()).collect())
assert last.get_column("len").sum() == int(sys.argv[2]), "the case does not hold every entry"
print(last.height, time.perf_counter() - start)
"""

IMPORTS_ONLY = """
import time
from forensics.sources import get
print("imported")
"""

BARE_READER = """
import sys, time
from systemd import journal
start = time.perf_counter()
reader = journal.Reader(path=sys.argv[1])
n = 0
for entry in reader:
    n += 1
assert n == int(sys.argv[2]), f"python-systemd read {n:,} entries of {sys.argv[2]}"
print("read", n, "entries")
"""


def inputs() -> dict[str, Path]:
    """The export, its .journal (made by systemd-journal-remote) and journalctl's JSON of it."""
    CACHE.mkdir(exist_ok=True)
    export = CACHE / f"sglang-{ENTRIES}.export"
    journal = CACHE / f"sglang-{ENTRIES}-journal"  # a directory: journal-remote rotates large outputs
    as_json = CACHE / f"sglang-{ENTRIES}.json"
    if not export.exists():
        print(f"generating {ENTRIES:,} entries -> {export}", file=sys.stderr)
        from forensics.lab.synth import write_export
        write_export(export.with_suffix(".tmp"), ENTRIES)
        export.with_suffix(".tmp").rename(export)
    if not journal.exists():
        print(f"systemd-journal-remote -> {journal}", file=sys.stderr)
        staging = journal.with_suffix(".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        subprocess.run([JOURNAL_REMOTE, f"--output={staging / 'remote.journal'}", str(export)], check=True,
                       capture_output=True)
        staging.rename(journal)
    if not as_json.exists():
        with open(as_json.with_suffix(".tmp"), "wb") as out:
            subprocess.run(["journalctl", "-D", str(journal), "-o", "json"], check=True, stdout=out)
        as_json.with_suffix(".tmp").rename(as_json)
    return {"export": export, "journal": journal, "json": as_json}


def _whole(label: str, code: str, *args: str, note: str = "") -> Measurement:
    """A Python snippet as a whole process (imports included), like the peers' rows."""
    return run(label, [sys.executable, "-c", code, *args], note=note)[0]


def main() -> None:
    paths = inputs()
    # Warm the page cache so the first measurement does not pay for disk reads the others skip.
    for path in paths.values():
        for file in sorted(path.iterdir()) if path.is_dir() else [path]:
            with open(file, "rb") as f:
                while f.read(1 << 24):
                    pass
    n = str(ENTRIES)
    pairs: list[tuple[str, Measurement, Measurement | None]] = [
        ("export", _whole("forensics export -> events", LOAD, "journal_export", str(paths["export"]), n), None),
        (".journal", _whole("forensics .journal -> events", LOAD, "journal_native", str(paths["journal"]), n),
         _whole("python-systemd Reader iteration", BARE_READER, str(paths["journal"]), n, note="no frame built")),
    ]
    if shutil.which("lnav"):
        lnav = lnav_count(str(paths["json"]), ENTRIES)
    else:
        lnav = Measurement("lnav indexing the JSON", float("nan"), float("nan"), "lnav not installed")
    pairs.append(("JSON", _whole("forensics JSON -> events", LOAD, "journal_json", str(paths["json"]), n), lnav))
    bundle = CACHE / f"bundle-{ENTRIES}"
    bundle.mkdir(exist_ok=True)
    inside = bundle / paths["export"].name
    if inside.is_symlink():  # an earlier version linked it: ingest does not follow links out of a bundle
        inside.unlink()
    if not inside.exists():
        try:
            os.link(paths["export"], inside)  # a hard link: a file of the bundle's own, no copy
        except OSError:
            shutil.copyfile(paths["export"], inside)
    case = CACHE / f"case-{ENTRIES}"
    json_lines, counted = run("journalctl -o json of the .journal (lines counted by wc -l)",
                              ["sh", "-c", 'journalctl -D "$1" -o json | wc -l', "sh", str(paths["journal"])])
    check_count("journalctl -o json", int(counted.split()[-1]), ENTRIES)
    others = [
        _whole("forensics ingest (export -> Parquet case), cold", INGEST, str(bundle), str(case), n),
        python("load_case + last record per host/unit, warm (case built, imports excluded)", OPEN_CASE, str(case), n,
               note="a notebook's cell once the case exists; CPU: whole process"),
        json_lines,
        _whole("(python + forensics.sources imports alone)", IMPORTS_ONLY, note="the floor of every Python row"),
    ]
    size_mib = paths["export"].stat().st_size / 2**20
    print(f"\n## journald ingestion, {ENTRIES:,} entries (export {size_mib:,.0f} MiB, "
          f"JSON {paths['json'].stat().st_size / 2**20:,.0f} MiB), {os.cpu_count()} cores, whole process trees\n")
    print("| input | forensics | s | CPU s | peak MiB | peer reading the same input | s | CPU s | peak MiB "
          "| peer / forensics, wall | per CPU-second |")
    print("|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    for fmt, ours, peer in pairs:
        if peer is None:
            print(f"| {fmt} | {ours.label} | {ours.seconds:.2f} | {ours.cpu_seconds:.2f} | {ours.peak_mib:,.0f} | "
                  "none doing the same work | | | | | |")
            continue
        print(f"| {fmt} | {ours.label} | {ours.seconds:.2f} | {ours.cpu_seconds:.2f} | {ours.peak_mib:,.0f} | "
              f"{peer.label}{' (' + peer.note + ')' if peer.note else ''} | {peer.seconds:.2f} | "
              f"{peer.cpu_seconds:.2f} | {peer.peak_mib:,.0f} | {_said(peer.seconds, ours.seconds)} | "
              f"{_said(peer.cpu_seconds, ours.cpu_seconds)} |")
    print("\n| also measured | s | CPU s | cores busy | peak MiB | note |")
    print("|---|---:|---:|---:|---:|---|")
    for m in others:
        print(f"| {m.label} | {m.seconds:.2f} | {m.cpu_seconds:.2f} | {cores(m) if 'warm' not in m.label else ''} | "
              f"{m.peak_mib:,.0f} | {m.note} |")


def _said(peer: float, ours: float) -> str:
    ratio = peer / ours
    return f"**{ratio:.1f}× faster**" if ratio >= 1 else f"**{1 / ratio:.1f}× slower**" if ratio == ratio else ""


def check_count(who: str, got: int, expected: int) -> None:
    """A peer's count of entries against the input's: a peer that read less did other work."""
    if got != expected:
        raise RuntimeError(f"{who} counted {got:,} entries of {expected:,}: not the work timed")


def lnav_count(as_json: str, expected: int) -> Measurement:
    """lnav indexing the JSON and counting its entries, the count checked."""
    with tempfile.TemporaryDirectory() as answers:
        answer = Path(answers, "count.csv")
        measured = run("lnav indexing the JSON (count(*) checked)",
                       ["lnav", "-n", "-c", ";SELECT count(*) AS n FROM all_logs", "-c", f":write-csv-to {answer}",
                        as_json])[0]
        check_count("lnav", int(answer.read_text().splitlines()[1]), expected)
    return measured
