"""Fuzz targets for the two C extensions, run by atheris in a process whose extensions were built
with AddressSanitizer and UndefinedBehaviorSanitizer (`tests/test_fuzz.py` builds them and starts
this module with the sanitizer runtime preloaded).

- `export_scan`: any bytes as a journal export, parsed by the C scanner, must give exactly what the
  line-by-line reference parser of `tests/sources/test_export_scan.py` gives (a differential oracle:
  a wrong answer is a failure, not only a crash), with values copied and as views; and the
  newlines it finds are numpy's.
- `lines`: any text as log lines must read without a memory error: one number or null per field
  and line, and the same numbers for a line alone as within the column (`label_numbers`); each
  line mapped to a distinct line equal to it, the distinct lines each once (`distinct_messages`).
- `journal_file`: any bytes as a journal file, written out as its export (`_journal_file`) in reads
  of any size, must be exactly what journalctl exports of the same bytes when read to the end, and
  the start of it when the reading stopped (what journalctl's export is taken after), wherever
  systemd opens the file (`journalctl --header`): a differential oracle again.

    python -m tests.fuzz.harness TARGET ASAN_BUILD_DIR [libFuzzer flags] CORPUS_DIR...
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path


def load_sanitized(build: Path) -> None:
    """Put the sanitizer builds of both extensions in place of the ordinary ones."""
    for name in ("forensics.sources.journal._export_scan", "forensics.sources.journal._journal_file",
                 "forensics.timeline._lines"):
        path = next(build.glob(name.rsplit(".", 1)[1] + "*.so"))
        loader = importlib.machinery.ExtensionFileLoader(name, str(path))
        spec = importlib.util.spec_from_file_location(name, path, loader=loader)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        sys.modules[name] = module


def export_scan(data: bytes) -> None:
    import numpy as np

    from forensics.sources.journal import _export_scan
    from tests.sources.test_export_scan import comparable, reference_entries, scanned_entries

    buffer = np.frombuffer(data, np.uint8)
    for length in (len(data), len(data) // 2):
        found = np.frombuffer(_export_scan.newline_positions(buffer, length), np.int64)
        if not np.array_equal(found, np.flatnonzero(buffer[:length] == 10)):
            raise AssertionError(f"newline positions wrong on {data!r} up to {length}")
    # the JSON reader's marks of each line, against bytes.count (which does not count overlaps either)
    lines = data.split(b"\n")
    starts = np.cumsum([0] + [len(line) + 1 for line in lines[:-1]]).astype(np.int64)
    ends = starts + np.array([len(line) for line in lines], np.int64)
    keys, strings, other = _export_scan.json_line_marks(buffer, starts, ends)
    expected = ([line.count(b'":') for line in lines], [line.count(b'":"') + line.count(b'": "') for line in lines],
                [any(m in line for m in (b'":[', b'": [', b'":null', b'": null')) for line in lines])
    if [np.frombuffer(keys, np.int32).tolist(), np.frombuffer(strings, np.int32).tolist(),
            np.frombuffer(other, np.bool_).tolist()] != list(expected):
        raise AssertionError(f"JSON line marks wrong on {data!r}")

    for copy in (True, False):
        scanned, expected = comparable(scanned_entries(data, copy)), comparable(reference_entries(data))
        if scanned != expected:
            raise AssertionError(f"scanner and reference differ on {data!r}:\n{scanned}\n{expected}")


FIELDS = {"running": ("#running-req",), "usage": ("token usage", "full token usage"), "swa": ("swa token usage",),
          "gen": ("gen throughput (token/s)",), "x": ("x",)}


def lines(data: bytes) -> None:
    import polars as pl

    from forensics.timeline.logs import distinct_messages
    from forensics.timeline.logs import label_numbers as read

    lines = data.decode("utf-8", "replace").split("\n")
    column = pl.Series("message", lines + [None], dtype=pl.String)
    numbers = read(column, FIELDS)
    if numbers.shape != (len(lines) + 1, len(FIELDS)) or numbers.row(len(lines)) != (None,) * len(FIELDS):
        raise AssertionError(f"wrong shape or a number for a null line on {data!r}")
    for i in range(0, len(lines), max(1, len(lines) // 3)):  # a line alone reads as within the column
        alone = read(column.slice(i, 1), FIELDS).row(0)
        if alone != numbers.row(i) and not any(a != a for a in alone):  # NaN is never equal to itself
            raise AssertionError(f"line {i} reads differently alone on {data!r}")
    distinct, place = distinct_messages(column)
    mapped = column.fill_null("") if place is None else distinct.gather(place)
    if mapped.to_list() != column.fill_null("").to_list() or distinct.n_unique() != distinct.len():
        raise AssertionError(f"distinct lines wrong on {data!r}")


def journal_file(data: bytes) -> None:
    import os
    import subprocess
    import tempfile

    from forensics.sources.journal import _journal_file as native

    out, place, size = bytearray(), [0, 0, 0, 0, 0], 1 + data[-1] * 64 if data else 4096
    while True:
        buffer = memoryview(bytearray(size))
        written, *place, status, why, at = native.write_entries(data, *place, buffer)
        out += buffer[:written]
        if status != native.TOO_BIG and status != native.FULL:
            break
        size = at if status == native.TOO_BIG else size
    with tempfile.NamedTemporaryFile(suffix=".journal") as f:
        f.write(data)
        f.flush()
        run = lambda *args: subprocess.run(["journalctl", f"--file={f.name}", *args, "--no-pager", "-q"],  # noqa: E731
                                           capture_output=True, env={**os.environ, "LD_PRELOAD": ""})
        if run("--header").returncode != 0:
            return  # a header systemd refuses: the reader hands the whole file to journalctl
        theirs = run("-o", "export").stdout
    if (bytes(out) != theirs) if status == native.END else not theirs.startswith(bytes(out)):
        raise AssertionError(f"{why or 'read to the end'} ({len(out)} bytes) differs from journalctl's export")


TARGETS = {"export_scan": export_scan, "lines": lines, "journal_file": journal_file}


def main() -> None:
    import atheris

    target, build = sys.argv[1], Path(sys.argv[2])
    load_sanitized(build)
    # forensics' own modules instrumented for coverage, not the libraries they import: instrumenting
    # polars' and numpy's ~280 modules took 15-35 s at every start and made each input 2.5x (export_scan)
    # to 20x (label_numbers) slower, for edges inside those libraries rather than in what is fuzzed
    with atheris.instrument_imports(include=["forensics"]):
        import forensics.timeline.logs  # noqa: F401 - instrumented for coverage
        import forensics.sources.journal.journal_export  # noqa: F401
    check = TARGETS[target]
    atheris.Setup([sys.argv[0], *sys.argv[3:]], check)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
