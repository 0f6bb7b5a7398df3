"""Journald ingestion: 1,000,000 SGLang-shaped entries through our three loaders and the usual tools.

Prints one table from one run: wall time and peak RSS of
- our export, JSON and .journal loaders building the `events` frame;
- `journalctl --file … -o json` writing JSON (to /dev/null);
- python-systemd's bare `Reader` iteration (builds no frame at all);
- lnav indexing the JSON export (when installed).
Inputs are generated once into bench/.cache/ (deterministic, seed 0). Python rows time the work
in-process (interpreter start and imports excluded); others are wall time. Peak RSS of our export
loader includes the pages of the memory-mapped export it reads.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from bench.measure import Measurement, python, run

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
print(result.rows.height, time.perf_counter() - start)
"""

INGEST = """
import sys, time
from forensics import ingest
start = time.perf_counter()
manifest = ingest(sys.argv[1], sys.argv[2])
assert manifest["totals"]["events"] == int(sys.argv[3]), f"ingested {manifest['totals']['events']:,} of {sys.argv[3]}"
print(manifest["totals"]["events"], time.perf_counter() - start)
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
print(0.0)
"""

BARE_READER = """
import sys, time
from systemd import journal
start = time.perf_counter()
reader = journal.Reader(path=sys.argv[1])
n = 0
for entry in reader:
    n += 1
print(n, time.perf_counter() - start)
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


def main() -> None:
    paths = inputs()
    # Warm the page cache so the first measurement does not pay for disk reads the others skip.
    for path in paths.values():
        for file in sorted(path.iterdir()) if path.is_dir() else [path]:
            with open(file, "rb") as f:
                while f.read(1 << 24):
                    pass
    baseline = python("(python + polars/pyarrow imports alone)", IMPORTS_ONLY, note="memory floor of every Python row")
    rows: list[Measurement] = [
        python("forensics export -> events", LOAD, "journal_export", str(paths["export"]), str(ENTRIES)),
        python("forensics JSON -> events", LOAD, "journal_json", str(paths["json"]), str(ENTRIES)),
        python("forensics .journal -> events", LOAD, "journal_native", str(paths["journal"]), str(ENTRIES)),
        run("journalctl -o json (to a file)", ["journalctl", "-D", str(paths["journal"]), "-o", "json"])[0],
        python("python-systemd Reader iteration", BARE_READER, str(paths["journal"]), note="no frame built"),
    ]
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
    rows.append(python("forensics ingest (export -> Parquet case)", INGEST, str(bundle), str(case), str(ENTRIES)))
    rows.append(python("load_case + last record per host/unit", OPEN_CASE, str(case), str(ENTRIES),
                       note="a notebook's first cell"))
    rows.append(baseline)
    if shutil.which("lnav"):
        rows.append(run("lnav indexing the JSON", ["lnav", "-n", "-c", ";SELECT count(*) FROM all_logs",
                                                  str(paths["json"])])[0])
    else:
        rows.append(Measurement("lnav indexing the JSON", float("nan"), float("nan"), "lnav not installed"))
    size_mib = paths["export"].stat().st_size / 2**20
    ours = rows[0]
    print(f"\n## journald ingestion, {ENTRIES:,} entries (export {size_mib:,.0f} MiB, "
          f"JSON {paths['json'].stat().st_size / 2**20:,.0f} MiB), {os.cpu_count()} cores\n")
    print("| what | seconds | peak RSS MiB | peak private MiB | export loader is N× faster | note |")
    print("|---|---:|---:|---:|---:|---|")
    for m in rows:
        comparable = m.seconds == m.seconds and m is not baseline and "load_case" not in m.label
        ratio = f"{m.seconds / ours.seconds:.1f}" if comparable else ""
        print(f"| {m.label} | {m.seconds:.2f} | {m.peak_mib:,.0f} | {m.peak_anon_mib:,.0f} | {ratio} | {m.note} |")
    print(f"\ntargets: export -> events <= 2 s (measured {ours.seconds:.2f} s); peak memory <= export size "
          f"({size_mib:,.0f} MiB; measured {ours.peak_mib:,.0f} MiB incl. the mapped file, "
          f"{ours.peak_anon_mib:,.0f} MiB private); >= 2x faster than "
          f"bare python-systemd iteration (measured {rows[4].seconds / ours.seconds:.1f}x)")
