"""Bad journal input: every record ends in events or in quarantine with file, place and reason.

Table-driven, with the exact messages; parsing goes on past each bad record.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import zstandard
from polars.testing import assert_frame_equal

from forensics.sources.journal import journal_export

from forensics.sources.journal import journal_json
from tests.conftest import export_entry

GOOD = export_entry(("__REALTIME_TIMESTAMP", "1781818487000000"), ("MESSAGE", "good"))
EXPORT_CASES = [
    # (name, bytes, records, parsed, [(line, reason)])
    ("truncated entry at end of file", GOOD + b"__REALTIME_TIMESTAMP=1781818488000000\nMESSAGE=cut sh", 2, 1,
     [(4, "line 4: entry at end of file is not closed by a blank line (file truncated?)")]),
    ("binary length past end of file", GOOD + b"__REALTIME_TIMESTAMP=1\nMESSAGE\n" + struct.pack("<Q", 99) + b"abc",
     2, 1, [(4, "line 5: binary field MESSAGE: length 99 runs past end of file (3 bytes left)")]),
    ("binary length cut off", GOOD + b"__REALTIME_TIMESTAMP=1\nMESSAGE\n\x05\x00", 2, 1,
     [(4, "line 5: binary field MESSAGE: length cut off by end of file")]),
    ("binary value not followed by newline",
     b"__REALTIME_TIMESTAMP=1\nMESSAGE\n" + struct.pack("<Q", 3) + b"abcX\n\n" + GOOD, 2, 1,
     [(1, "line 2: binary field MESSAGE: 3-byte value not followed by a newline")]),
    ("empty field name", b"__REALTIME_TIMESTAMP=1\n=value\n\n" + GOOD, 2, 1, [(1, "line 2: empty field name")]),
    ("lower-case field name", b"__REALTIME_TIMESTAMP=1\nmessage=hi\n\n" + GOOD, 2, 1,
     [(1, "line 2: invalid field name 'message' (only A-Z, 0-9 and _ allowed)")]),
    ("field name starting with a digit", GOOD + b"__REALTIME_TIMESTAMP=1\n1ABC=x\n\n", 2, 1,
     [(4, "line 5: field name '1ABC' starts with a digit")]),
    ("field name too long", GOOD + b"__REALTIME_TIMESTAMP=1\n" + b"A" * 65 + b"=x\n\n", 2, 1,
     [(4, "line 5: field name '" + "A" * 40 + "'... longer than 64 bytes")]),
    ("a line that is not a field", b"__REALTIME_TIMESTAMP=1\nhello world\n\n" + GOOD, 2, 1,
     [(1, "line 2: no '=' and invalid field name 'hello world' (only A-Z, 0-9 and _ allowed)")]),
    ("timestamp that is not a number", GOOD + b"__REALTIME_TIMESTAMP=17818181OO\nMESSAGE=x\n\n", 2, 1,
     [(4, "line 4: __REALTIME_TIMESTAMP 17818181OO is not an integer")]),
    ("priority out of range", GOOD + b"__REALTIME_TIMESTAMP=1\nPRIORITY=9\n\n", 2, 1,
     [(4, "line 4: PRIORITY 9 is not 0-7")]),
    ("pid that is not a number", GOOD + b"__REALTIME_TIMESTAMP=1\n_PID=abc\n\n", 2, 1,
     [(4, "line 4: _PID abc is not an integer")]),
    ("white space around integers is allowed", GOOD + b"__REALTIME_TIMESTAMP= 1781818488000000\n_PID=42 \n"
     b"PRIORITY= 6\n\n" + GOOD, 3, 3, []),
    ("priority out of range after white space", GOOD + b"__REALTIME_TIMESTAMP=1\nPRIORITY= 9 \n\n", 2, 1,
     [(4, "line 4: PRIORITY  9  is not 0-7")]),
    ("invalid UTF-8 in a text line is kept, not quarantined", b"__REALTIME_TIMESTAMP=1\nMESSAGE=caf\xe9\n\n", 1, 1, []),
    ("NUL bytes in a text line are kept", b"__REALTIME_TIMESTAMP=1\nMESSAGE=a\x00b\n\n", 1, 1, []),
    ("extra blank lines between entries", b"\n\n" + GOOD + b"\n\n\n" + GOOD, 2, 2, []),
]


@pytest.mark.parametrize(("data", "records", "parsed", "quarantined"),
                         [c[1:] for c in EXPORT_CASES], ids=[c[0] for c in EXPORT_CASES])
def test_export_bad_input(tmp_path: Path, data: bytes, records: int, parsed: int,
                          quarantined: list[tuple[int, str]]) -> None:
    path = tmp_path / "bad.export"
    path.write_bytes(data)
    result = journal_export.parse(path)
    result.check_accounting(path)
    assert (result.records, result.rows.height) == (records, parsed)
    assert result.quarantine.select("line", "reason").rows() == quarantined
    assert set(result.quarantine.get_column("source_file")) <= {str(path)}
    for excerpt in result.quarantine.get_column("excerpt"):
        assert 0 < len(excerpt) <= 80


def test_integers_are_read_through_white_space(tmp_path: Path) -> None:
    path = tmp_path / "spaced.export"
    path.write_bytes(GOOD + b"__REALTIME_TIMESTAMP= 1781818488000000\n_PID=42 \nPRIORITY= 6\nMESSAGE=m\n\n")
    row = journal_export.parse(path).rows.row(1, named=True)
    assert (row["__REALTIME_TIMESTAMP"], row["pid"], row["priority"]) == (1781818488000000, 42, 6)


def test_non_utf8_and_nul_values_survive_exactly(tmp_path: Path) -> None:
    path = tmp_path / "odd.export"
    path.write_bytes(b"__REALTIME_TIMESTAMP=1\nMESSAGE=caf\xe9\nNOTE=a\x00b\n\n")
    row = journal_export.parse(path).rows.row(0, named=True)
    assert row["message"] == "caf\ufffd" and row["raw_fields"] == [{"name": "MESSAGE", "value": b"caf\xe9"}]
    assert row["NOTE"] == "a\x00b"


JSON_CASES = [
    ("invalid JSON", b'{"__REALTIME_TIMESTAMP": "1", "MESSAGE": "x"\n', "line 1: invalid JSON: Expecting ',' delimiter (column 45)"),
    ("not an object", b'["__REALTIME_TIMESTAMP"]\n', "line 1: expected a JSON object, found list"),
    ("a number value", b'{"__REALTIME_TIMESTAMP": "1", "N": 5}\n',
     "line 1: field N has a value that is neither a string, a byte array nor null"),
    ("bad field name", b'{"__REALTIME_TIMESTAMP": "1", "lower": "x"}\n',
     "line 1: invalid field name 'lower' (only A-Z, 0-9 and _ allowed)"),
    ("not UTF-8", b'{"__REALTIME_TIMESTAMP": "1", "M": "\xff"}\n', "line 1: not UTF-8 at byte 36"),
    ("cut mid-object", b'{"__REALTIME_TIMESTAMP": "1", "MESS', "line 1: invalid JSON: Unterminated string starting at (column 31)"),
]


def test_an_entry_without_a_time_is_read_with_its_time_unknown(tmp_path: Path) -> None:
    """The journal's export formats make the address fields optional for a reader (systemd's own
    JSON example in docs/JOURNAL_EXPORT_FORMATS.md has none): such an entry is well-formed, read with
    a null time, never quarantined for it."""
    export = tmp_path / "no-time.export"
    export.write_bytes(b"MESSAGE=when?\n\n" + GOOD)
    result = journal_export.parse(export)
    result.check_accounting(export)
    assert (result.records, result.rows.height, result.quarantine.height) == (2, 2, 0)
    assert result.rows.get_column("ts").null_count() == 1
    document = tmp_path / "no-time.json"
    document.write_bytes(b'{"MESSAGE": "x"}\n')
    result = journal_json.parse(document)
    assert (result.records, result.rows.height, result.quarantine.height) == (1, 1, 0)
    assert result.rows.row(0, named=True)["ts"] is None and result.rows.row(0, named=True)["message"] == "x"


@pytest.mark.parametrize(("data", "reason"), [c[1:] for c in JSON_CASES], ids=[c[0] for c in JSON_CASES])
def test_json_bad_input(tmp_path: Path, data: bytes, reason: str) -> None:
    good = b'{"__REALTIME_TIMESTAMP": "1781818487000000", "MESSAGE": "good"}\n'
    path = tmp_path / "bad.json"
    path.write_bytes(good + data + (b"" if data.endswith(b"\n") else b"\n") + good)
    result = journal_json.parse(path)
    result.check_accounting(path)
    assert (result.records, result.rows.height) == (3, 2)
    assert result.quarantine.select("line", "reason").rows() == [(2, reason.replace("line 1", "line 2"))]


@pytest.mark.parametrize("compressed", [False, True])
@pytest.mark.parametrize("chunk", [64, 97, 150, 4096])
def test_chunked_parse_equals_whole_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int,
                                          compressed: bool) -> None:
    """Binary values holding blank lines must not be cut at a chunk boundary."""
    rng = np.random.default_rng(3)
    parts = []
    for i in range(60):
        payload = rng.integers(0, 256, size=int(rng.integers(0, 40)), dtype=np.uint8).tobytes()
        payload = payload[:5] + b"\n\n" + payload[5:] if i % 3 == 0 else payload
        parts.append(export_entry(("__REALTIME_TIMESTAMP", str(1781818487000000 + i)), ("MESSAGE", payload),
                                  ("I", str(i))))
    parts.append(b"__REALTIME_TIMESTAMP=1\nbad line\n\n")
    path = tmp_path / "many.export"
    path.write_bytes(b"".join(parts))
    if compressed:  # decompressed pieces pass through reused buffers: a leftover byte would show here
        path = path.rename(path.with_suffix(".export.zst"))
        path.write_bytes(zstandard.ZstdCompressor().compress(b"".join(parts)))
    whole = journal_export.parse(path)
    monkeypatch.setattr(journal_export, "CHUNK_BYTES", chunk)
    chunked = journal_export.parse(path)
    assert_frame_equal(chunked.rows, whole.rows)
    assert_frame_equal(chunked.quarantine, whole.quarantine)
    bad_line = b"".join(parts[:-1]).count(b"\n") + 2
    assert whole.rows.height == 60
    assert whole.rows.get_column("I").to_list() == [str(i) for i in range(60)]
    assert whole.quarantine.select("line", "reason").rows() == [
        (bad_line - 1, f"line {bad_line}: no '=' and invalid field name 'bad line' (only A-Z, 0-9 and _ allowed)")]


def test_json_fast_and_record_by_record_paths_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lines polars reads and lines Python reads merge back exactly, in line order."""
    lines = []
    for i in range(40):
        record = {"__REALTIME_TIMESTAMP": str(1781818487000000 + i), "MESSAGE": f"[2026-06-18 21:34:{i:02d}] m\\"}
        if i % 5 == 1:
            record["BLOB"] = [1, 2, 255]                  # bytes: an array
        if i % 7 == 2:
            record["TAGS"] = ["a", "b"]                   # repeated: an array
        if i % 9 == 3:
            record["HUGE"] = None                         # too large for journalctl
        if i == 30:
            record["LATE_KEY"] = "not in the first lines"  # outside the sampled schema
        if i == 33:
            record["MESSAGE"] = 'text with "quotes": [and brackets]'
        lines.append(json.dumps(record, separators=(",", ":")).encode())
    lines.insert(20, b"")
    lines.insert(25, b'{"__REALTIME_TIMESTAMP":"1","N":5}')
    path = tmp_path / "mixed.json"
    path.write_bytes(b"\n".join(lines) + b"\n")
    monkeypatch.setattr(journal_json, "_SCHEMA_SAMPLE_LINES", 3)
    mixed = journal_json.parse(path)
    monkeypatch.setattr(journal_json, "_fast", lambda path, data, buf, starts, *rest: (
        pl.DataFrame(), np.ones(len(starts), bool)))
    python_only = journal_json.parse(path)
    assert_frame_equal(mixed.rows, python_only.rows)
    assert_frame_equal(mixed.quarantine, python_only.quarantine)
    assert mixed.rows.height == 40 and mixed.records == 41
    assert mixed.rows.filter(pl.col("LATE_KEY").is_not_null()).height == 1
    assert mixed.quarantine.select("line", "reason").rows() == [
        (26, "line 26: field N has a value that is neither a string, a byte array nor null")]


def test_export_cut_at_every_byte_never_crashes_and_loses_nothing(tmp_path: Path) -> None:
    """A file cut anywhere (as a copy interrupted mid-transfer would be) still accounts for every record."""
    data = b"".join(export_entry(("__REALTIME_TIMESTAMP", str(1781818487000000 + i)),
                                 ("MESSAGE", b"bin\n\nary\xff" if i == 1 else f"m{i}"), ("I", str(i)))
                    for i in range(3))
    path = tmp_path / "cut.export"
    for cut in range(1, len(data) + 1):
        path.write_bytes(data[:cut])
        result = journal_export.parse(path)
        result.check_accounting(path)
        # Entries are parsed in order from the first. The cut one is quarantined when the cut falls
        # inside a line; cut right after a line it is read as far as it goes, and the notes say so.
        parsed = result.rows.get_column("I").to_list() if "I" in result.rows.columns else []
        whole = [i for i in parsed if i is not None]
        assert whole == [str(i) for i in range(len(whole))]
        if cut == len(data):
            assert parsed == ["0", "1", "2"] and result.quarantine.height == 0 and result.notes == []
        elif not data[:cut].endswith(b"\n"):
            assert result.quarantine.height >= 1
        elif not data[:cut].endswith(b"\n\n") and result.quarantine.height == 0:
            assert result.notes and "without its blank line" in result.notes[0]


def test_export_with_random_damage_accounts_for_every_record(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    clean = b"".join(export_entry(("__REALTIME_TIMESTAMP", str(1781818487000000 + i)), ("MESSAGE", f"message {i}"),
                                  ("PRIORITY", "6")) for i in range(50))
    path = tmp_path / "damaged.export"
    for _ in range(200):
        damaged = bytearray(clean)
        for position in rng.integers(0, len(damaged), size=5):
            damaged[position] = int(rng.integers(0, 256))
        path.write_bytes(bytes(damaged))
        result = journal_export.parse(path)
        result.check_accounting(path)
        assert result.records >= 1
