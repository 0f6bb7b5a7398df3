"""Inputs that shrink while forensics has them mapped (another program truncating or rewriting a
file of the bundle): the read past the new end would raise SIGBUS and end the process. Each case
runs in a child process, so that a guard that fails shows as its death by SIGBUS (exit -7), not
as the test run's."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

from forensics.lab.synth import entries, write_export_entry
from forensics.sources.common.mapguard import Shrunk

READ_PAST_THE_END = """
import os, sys
from forensics.sources.common import mapguard, rawio
path = sys.argv[1]
data, damage = rawio.read_whole(path)
os.truncate(path, 4096)
print(bytes(data[8192:8200]) == bytes(8), mapguard.shrunk_under(os.path.dirname(path)),
      mapguard.shrunk_under(os.path.dirname(path)))
"""


def _export(path: Path, n: int, seed: int) -> None:
    out = io.BytesIO()
    for fields in entries(n, hosts=1, seed=seed):
        write_export_entry(out, fields)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(out.getvalue())


def _run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True)
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
    return done


def test_a_mapped_file_that_shrinks_reads_as_zeros_past_its_end_and_is_told_once(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "a.export"
    _export(path, 200, seed=1)
    size = path.stat().st_size
    said = _run(READ_PAST_THE_END, str(path)).stdout.strip()
    assert said == f"True {Shrunk(str(path.resolve()), 4096, size, 4096)} None"


INGEST = """
import os, sys
from pathlib import Path
import forensics.case.build as build
import forensics.sources.journal.journal_export as export
bundle, case, when = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
shrinking = bundle / "journal" / "shrinks.export"

calls = []

def truncating(original, only_while_read):
    def wrapped(*args, **kwargs):
        reading = only_while_read and str(args[2]).endswith("shrinks.export")  # a piece of it
        calls.extend([1] if reading else [])
        if (reading or not only_while_read) and shrinking.stat().st_size > 4096:
            os.truncate(shrinking, 4096)
        return original(*args, **kwargs)
    return wrapped

if when == "while it is read":  # in its first piece's reading, the piece still to be read
    export.CHUNK_BYTES = 16384  # pieces of 16 KiB: the input is many
    export._read_piece = truncating(export._read_piece, True)
else:  # after its rows were read, before the case is written from them
    build.finish_held = truncating(build.finish_held, False)
try:
    manifest = build.ingest(bundle, case)
except Exception as error:
    print(type(error).__name__, error)
    print("case written:", Path(case).exists())
else:
    print(json.dumps(manifest["inputs"]))
    print("pieces parsed:", len(calls))
"""


def _bundle(tmp_path: Path) -> Path:
    bundle = tmp_path / "bundle"
    _export(bundle / "journal" / "shrinks.export", 400, seed=2)
    _export(bundle / "journal" / "stays.export", 300, seed=3)
    return bundle


def test_an_input_that_shrinks_while_it_is_read_is_that_inputs_error_and_the_others_are_read(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    size = (bundle / "journal" / "shrinks.export").stat().st_size
    said, parsed = _run("import json\n" + INGEST, str(bundle), str(tmp_path / "case"), "while it is read"
                        ).stdout.strip().splitlines()
    inputs = {e["path"]: e for e in json.loads(said)}
    assert (bundle / "journal" / "shrinks.export").stat().st_size == 4096 and parsed != "pieces parsed: 0"
    shrunk, stayed = inputs["journal/shrinks.export"], inputs["journal/stays.export"]
    assert (shrunk["records"], shrunk["parsed"], shrunk["quarantined"]) == (0, 0, 0)
    assert shrunk["error"] == (f"journal/shrinks.export: the file shrank while it was read: it was {size:,} bytes, "
                               "it is 4,096 now, and whatever was read of it from byte 4,096 on read as zeros; "
                               "none of its records are kept (read it again once nothing writes to it)")
    assert (stayed["records"], stayed["parsed"], stayed.get("error")) == (300, 300, None)


def test_a_file_that_shrinks_after_it_was_read_stops_the_case_with_that_said(tmp_path: Path) -> None:
    """Its rows still point into the map until the case is written: written, they would hold zeros."""
    bundle = _bundle(tmp_path)
    size = (bundle / "journal" / "shrinks.export").stat().st_size
    said = _run("import json\n" + INGEST, str(bundle), str(tmp_path / "case"), "after it was read").stdout
    first, written = said.strip().splitlines()
    assert first == (f"CaseError journal/shrinks.export: the file shrank after it was read, before its records were "
                     f"written: it was {size:,} bytes, it is 4,096 now, and whatever was read of it from byte 4,096 "
                     "on read as zeros; the case would hold zeros for them, so none is written (ingest again once "
                     "nothing writes to the bundle)")
    assert written == "case written: False"


STALE = """
import gc, os, sys
from forensics.sources.common import mapguard, rawio
a, b = sys.argv[1], sys.argv[2]
first, _ = rawio.read_whole(a)
first.close()  # unmapped: no longer guarded, though the object lives on
del first
gc.collect()
second, _ = rawio.read_whole(b)  # of the same size: often mapped where the first was
os.truncate(b, 0)
print(bytes(second[40000:40004]) == bytes(4), mapguard.shrunk_under(os.path.dirname(a)),
      mapguard.shrunk_under(os.path.dirname(b)).path == os.path.realpath(b))
"""


def test_a_map_no_longer_guarded_is_never_blamed_for_a_later_one(tmp_path: Path) -> None:
    """A map stops being guarded before its memory is given back, so the next map at the same
    address is the one named (a guard outliving its map named the wrong file)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for name in ("a/one.log", "b/two.log"):
        (tmp_path / name).write_bytes(b"x" * 65536)
    said = _run(STALE, str(tmp_path / "a" / "one.log"), str(tmp_path / "b" / "two.log")).stdout.split()
    assert said == ["True", "None", "True"]


SENT = """
import os, signal, sys
from forensics.sources.common import rawio
data, _ = rawio.read_whole(sys.argv[1])  # the guard installed
os.kill(os.getpid(), signal.SIGBUS)
print("survived a SIGBUS sent by kill")
"""


def test_a_sigbus_sent_by_another_program_still_ends_the_process(tmp_path: Path) -> None:
    """Only a read past a guarded map's end is taken; a SIGBUS sent with kill is handled as it was
    before the guard (here: the default, the process ends by it)."""
    path = tmp_path / "a.log"
    path.write_bytes(b"x" * 65536)
    done = subprocess.run([sys.executable, "-c", SENT, str(path)], capture_output=True, text=True)
    assert done.returncode == -7 and "survived" not in done.stdout


IN_THE_LAST_PAGE = """
import os, sys
from forensics.sources.common import mapguard, rawio
path = sys.argv[1]
data, _ = rawio.read_whole(path)
os.truncate(path, 5000)  # inside the last page: the rest of it reads zeros, and nothing faults
print(bytes(data[7000:7004]) == bytes(4), mapguard.shrunk_under(os.path.dirname(path)))
"""


def test_a_cut_inside_the_last_page_is_found_by_the_files_size(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    path.write_bytes(b"x" * 8000)
    said = _run(IN_THE_LAST_PAGE, str(path)).stdout.strip()
    assert said == f"True {Shrunk(str(path.resolve()), 5000, 8000, 5000)}"


MAPS_CLOSED = """
import mmap, os, sys
from forensics.sources.common import mapguard
a, b = sys.argv[1], sys.argv[2]
with open(a, "rb") as f, mapguard.GuardedMap(f.fileno(), 0, access=mmap.ACCESS_READ) as first:
    first.guard(a)
print("unguarded by with:", first._slot == -1)
with open(b, "rb") as f:
    second = mapguard.GuardedMap(f.fileno(), 0, access=mmap.ACCESS_READ)
second.guard(b)
view = memoryview(second)
try:
    second.close()
except BufferError:
    print("still mapped, guarded again:", second._slot >= 0)
os.truncate(b, 0)
print("read past the end:", view[40000], mapguard.shrunk_under(os.path.dirname(b)).path == os.path.realpath(b))
"""


def test_a_map_stays_guarded_while_mapped_and_no_longer_once_unmapped(tmp_path: Path) -> None:
    """`with` unguards the map as it unmaps it; a close refused while a view lives keeps it guarded."""
    for name in ("a.log", "b.log"):
        (tmp_path / name).write_bytes(b"x" * 65536)
    said = _run(MAPS_CLOSED, str(tmp_path / "a.log"), str(tmp_path / "b.log")).stdout.splitlines()
    assert said == ["unguarded by with: True", "still mapped, guarded again: True", "read past the end: 0 True"]


ANALYSIS = """
import os, sys
from pathlib import Path
import forensics.analyze as analyze
bundle, case = Path(sys.argv[1]), sys.argv[2]
original = analyze.build_timeline

def truncating(*args, **kwargs):  # the case is written; the timeline reads the rows held in memory
    os.truncate(bundle / "journal" / "shrinks.export", 4096)
    return original(*args, **kwargs)

analyze.build_timeline = truncating
try:
    analyze.analyze(bundle, case)
except Exception as error:
    print(type(error).__name__, error)
"""


def test_a_file_that_shrinks_while_the_analysis_reads_its_rows_from_memory_gives_no_findings(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    size = (bundle / "journal" / "shrinks.export").stat().st_size
    said = _run(ANALYSIS, str(bundle), str(tmp_path / "case")).stdout.strip()
    assert said == ("CaseError journal/shrinks.export: the file shrank after the case was written, while its records "
                    f"were read from memory: it was {size:,} bytes, it is 4,096 now, and whatever was read of it from "
                    "byte 4,096 on read as zeros; the findings may rest on those zeros, so none is given (ingest "
                    "again once nothing writes to the bundle)")
