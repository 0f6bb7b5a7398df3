"""The C export scanner against a plain reference written line by line from the spec.

`_export_scan` is the journal readers' hot loops in C: these tests feed it generated exports (many
distinct keys in shifting order, repeated fields, binary values holding newlines, every kind of
UTF-8 mistake, garbage lines) and then damage them at random, and check every entry's fields,
repeated values, line number and first problem against `reference_entries` below, which walks the
file the slow obvious way; and its helpers (newlines, the JSON reader's marks) against numpy's and
polars' answers.
"""

from __future__ import annotations

import random
import re
import struct

import numpy as np
import polars as pl
import pytest

from forensics.sources.journal.cursor import JOURNALD_CURSOR, PARSED, cursor_text
from forensics.sources.journal.fields import SCANNED_INTEGERS, field_name_problem
from forensics.sources.journal import _export_scan
from forensics.sources.journal.journal_export import MAX_FIELDS, _parse_chunk

Entry = dict  # {"line": int, "problem": str | None, "fields": {name: [value bytes, ...]}}


def reference_entries(data: bytes) -> list[Entry]:
    """The entries of a whole export file, read one line at a time (Journal Export Format rules,
    with this project's wording of problems; an entry reports its earliest problem)."""
    entries: list[Entry] = []
    problems: list[tuple[Entry, int, str]] = []
    current: Entry | None = None
    closed = False

    def keep_field(entry: Entry, line: int) -> bool:
        """journald's limit: past MAX_FIELDS fields the entry is refused and its later fields dropped."""
        entry["count"] = entry.get("count", 0) + 1
        if entry["count"] == MAX_FIELDS + 1:
            problems.append((entry, line, f"more than {MAX_FIELDS} fields: journald writes no such entry "
                                          "(forged or damaged); its fields past that are not kept"))
        return entry["count"] <= MAX_FIELDS
    pos = counted = newlines = 0  # newlines before `counted`, counted as the walk goes on
    while pos < len(data):
        newline = data.find(b"\n", pos)
        end = len(data) if newline < 0 else newline
        newlines += data.count(b"\n", counted, pos)
        counted = pos
        line = newlines + 1
        text = data[pos:end]
        pos = end + 1
        if not text:
            current, closed = None, newline >= 0
            continue
        closed = False
        if current is None:
            current = {"line": line, "problem": None, "fields": {}}
            entries.append(current)
        name, equals, value = text.partition(b"=")
        if equals:
            if keep_field(current, line):
                current["fields"].setdefault(name, []).append(value)
            if field_name_problem(name):
                problems.append((current, line, field_name_problem(name)))
            continue
        if field_name_problem(text):
            problems.append((current, line, f"no '=' and {field_name_problem(text)}"))
            continue
        size_at = end + 1
        if size_at + 8 > len(data):
            problems.append((current, line, f"binary field {text.decode()}: length cut off by end of file"))
            break
        size = struct.unpack_from("<Q", data, size_at)[0]
        left = len(data) - size_at - 8
        if size >= left:
            said = f"binary field {text.decode()}: length {size} runs past end of file ({left} bytes left)"
            more, at = 0, data.find(b"\n\n", size_at + 8)  # entries in the bytes it swallows, one by one
            while at >= 0:
                following = data.find(b"\n\n", at + 2)
                part = data[at + 2:following if following >= 0 else len(data)]
                more += bool(part.strip(b"\n"))
                at = following
            if more:
                said += f"; those bytes hold about {more} more entr{'ies' if more > 1 else 'y'} by their blank lines, not read"
            problems.append((current, line, said))
            break  # the declared value takes the rest of the file
        elif data[size_at + 8 + size] != ord("\n"):
            problems.append((current, line, f"binary field {text.decode()}: {size}-byte value not followed by a newline"))
            blank = data.find(b"\n\n", size_at + 8 + size)  # the entry ends at the next blank line after it
            if blank < 0:
                break
            pos = blank + 1
        else:
            if keep_field(current, line):
                current["fields"].setdefault(text, []).append(data[size_at + 8:size_at + 8 + size])
            pos = size_at + 8 + size + 1
    for entry, line, why in sorted(problems, key=lambda p: p[1]):
        if entry["problem"] is None:
            entry["problem"] = f"line {line}: {why}"
    if entries and not closed and entries[-1]["problem"] is None and not data.endswith(b"\n"):
        entries[-1]["problem"] = (f"line {entries[-1]['line']}: entry at end of file is not closed by a blank line "
                                  f"(file truncated?)")
    return entries


def scanned_entries(data: bytes, copy: bool) -> list[Entry]:
    buffer = np.frombuffer(data + bytes(16), dtype=np.uint8)
    frame = _parse_chunk(buffer, len(data), True, 0, 0, copy)
    if PARSED[0] in frame.columns:  # a cursor held as its values: written back, as the case's readers do
        frame = frame.with_columns(pl.coalesce(pl.col("__CURSOR"), cursor_text(*map(pl.col, PARSED)))
                                   .alias("__CURSOR")).drop(PARSED)
    for name in SCANNED_INTEGERS:  # a plainly written number held as one: written back
        if f"@int {name}" in frame.columns:
            number = pl.col(f"@int {name}").cast(pl.String)
            if frame.schema[name] != pl.String:  # some value is not UTF-8: the column stays bytes
                number = number.cast(pl.Binary)
            frame = frame.with_columns(pl.coalesce(name, number).alias(name)).drop(f"@int {name}")
    out = []
    for row in frame.iter_rows(named=True):
        fields: dict[bytes, list[bytes]] = {}
        for name, value in row.items():
            if not name.startswith("@") and value is not None:
                fields[name.encode()] = [value.encode() if isinstance(value, str) else value]
        for item in row.get("@raw") or []:
            fields[item["name"].encode()].append(item["value"])
        out.append({"line": row["@line"], "problem": row["@problem"], "fields": fields})
    return out


def comparable(entries: list[Entry]) -> list[tuple]:
    """Entries as the scanner reports them: fields with a bad name are left out (the problem says why)."""
    return [(e["line"], e["problem"], sorted((n, v) for n, v in e["fields"].items() if not field_name_problem(n)))
            for e in entries]


VALUES = [b"", b"x", b"twelve bytes", b"thirteen byte", "café ünïcödé 🚀".encode(), b"caf\xe9",
          b"\xc0\x80 overlong", b"\xed\xa0\x80 surrogate", b"\xf4\x90\x80\x80 past U+10FFFF", b"cut \xe2\x82",
          b"\xf0\x9f\x9a", b"a\x00b", b"\xef\xbb\xbf bom", b"\xf4\x8f\xbf\xbf max", "long " * 30]
BAD_NAMES = [b"lower", b"1DIGIT", b"A" * 65, b"", b"SP ACE"]


# identifiers the scanner codes (`journal_export._CODED_NAMES`), each drawn often so that their
# values repeat, in runs and out of them
CODED = [b"_BOOT_ID", b"SYSLOG_IDENTIFIER", b"_SYSTEMD_UNIT", b"UNIT"]
# cursors: journald's form (sd_journal_get_cursor, the first from a real journal's export: systemd's
# test/test-journals), which the scanner holds as values, and near misses that must stay text
ID = "a8bd5c2fa5a0480d97fbef1c0d2b0e7a"
CURSORS = [
    f"s={ID};i=1;b=d1b2e2c3d4e5f60718293a4b5c6d7e8f;m=5a1b;t=5f6e7d8c9bab0;x=1f2e3d4c5b6a7988",
    f"s={ID};i=0;b={ID};m=0;t=0;x=0",
    f"s={ID};i=ffffffffffffffff;b={ID};m=ffffffffffffffff;t=1;x=fedcba9876543210",
    f"s={ID};i=01;b={ID};m=0;t=0;x=0",  # a leading zero
    f"s={ID};i=1;b={ID};m=0;t=0;x=049f3e2279b99cdb",  # a zero-padded hash
    f"s={ID.upper()};i=1;b={ID};m=0;t=0;x=0",  # upper case
    f"s={ID};i=1;b={ID};m=0;t=0;x=10000000000000000",  # 17 digits
    f"s={ID};i=1;b={ID};m=0;t=0",  # cut short
    f"s={ID};i=1;b={ID};m=0;t=0;x=0;",  # one more separator
    f"s={ID[:31]};i=1;b={ID};m=0;t=0;x=0",  # a short id
    f"i=1;s={ID};b={ID};m=0;t=0;x=0",  # another order
    f"s={ID};i=;b={ID};m=0;t=0;x=0",  # an empty number
    f"s={ID};i=1;b={ID};m=0;t=0;x=0 ",  # a trailing space
    "s=;i=;b=;m=;t=;x=", "", "not a cursor", "s=caf\xe9",
]
# integers the scanner reads (`fields.SCANNED_INTEGERS`): plain decimals below 10^18, which it holds
# as numbers, and other spellings it must leave as text
INTEGERS = ["0", "6", "1781818487000000", "999999999999999999", "1000000000000000000", "007", "-1", "+5",
            " 12", "12 ", "1e3", "0x10", "", "\u0661\u0662"]


def generate(rng: np.random.Generator, entries: int) -> bytes:
    names = ([f"F{i}".encode() for i in range(300)] + [b"_PID", b"MESSAGE", b"__REALTIME_TIMESTAMP"] + CODED * 20
             + [b"__CURSOR"] * 20 + [name.encode() for name in SCANNED_INTEGERS] * 10)
    out = bytearray()
    for i in range(entries):
        chosen = list(dict.fromkeys(names[k] for k in rng.choice(len(names), size=int(rng.integers(1, 12)),
                                                                replace=False)))
        if rng.random() < 0.7:
            chosen.sort()  # mostly the same order, as journald writes them; sometimes shuffled
        for name in chosen:
            for _ in range(2 if rng.random() < 0.1 else 1):
                drawn = CURSORS if name == b"__CURSOR" else INTEGERS if name.decode() in SCANNED_INTEGERS else VALUES
                drawn = drawn if rng.random() < 0.8 else VALUES
                value = drawn[int(rng.integers(len(drawn)))]
                value = value.encode() if isinstance(value, str) else value
                if rng.random() < 0.15:
                    value = value + b"\n\n" + value  # only a binary field can hold a newline
                    out += name + b"\n" + struct.pack("<Q", len(value)) + value + b"\n"
                else:
                    out += name + b"=" + value + b"\n"
        if rng.random() < 0.05:
            out += BAD_NAMES[int(rng.integers(len(BAD_NAMES)))] + b"=v\n"
        if rng.random() < 0.03:
            out += b"not a field\n"
        out += b"\n" * (1 + (rng.random() < 0.05))
    return bytes(out)


@pytest.mark.parametrize("copy", [True, False], ids=["dense", "views"])
def test_scanner_matches_the_reference_on_clean_and_damaged_exports(copy: bool) -> None:
    rng = np.random.default_rng(5)
    for round_ in range(150):
        data = generate(rng, int(rng.integers(1, 40)))
        if round_ % 3:
            damaged = bytearray(data)
            for position in rng.integers(0, len(damaged), size=int(rng.integers(1, 6))):
                damaged[position] = int(rng.choice([0, 10, 61, 65, 0xff]))
            data = bytes(damaged[:int(rng.integers(len(damaged) // 2, len(damaged) + 1))])
        assert comparable(scanned_entries(data, copy)) == comparable(reference_entries(data)), f"round {round_}"


def test_text_columns_are_strings_exactly_when_every_value_is_utf8() -> None:
    for value in VALUES:
        value = value.encode() if isinstance(value, str) else value
        data = b"__REALTIME_TIMESTAMP=1\nMESSAGE=" + value + b"\n\n"
        buffer = np.frombuffer(data + bytes(16), dtype=np.uint8)
        column = _parse_chunk(buffer, len(data), True, 0, 0).get_column("MESSAGE")
        try:
            expected = value.decode("utf-8")
        except UnicodeDecodeError:
            assert column.to_list() == [value], value
        else:
            assert column.to_list() == [expected], value


def test_many_keys_and_a_piece_without_a_closing_blank_line() -> None:
    # 5,000 distinct keys over five entries (journald's limit is 1,024 per entry; a piece's 4,096), then a last
    # entry that ends the file without its blank line
    data = b"\n".join(b"".join(b"K%d=%d\n" % (k, k) for k in range(e * 1000, e * 1000 + 1000)) for e in range(5))
    data += b"\n" + b"K1=again\n"
    buffer = np.frombuffer(data, dtype=np.uint8)
    assert _export_scan.scan(buffer, len(data), False, True, frozenset(), frozenset(), b"__CURSOR", frozenset(), 80) is None  # not between entries
    frame = _parse_chunk(buffer, len(data), True, 0, 0)
    assert frame.height == 6 and frame.get_column("K4095").to_list() == [None] * 4 + ["4095", None]
    # a piece holds 4,096 distinct names (each a column): the fifth entry's 97th, K4096, is past them
    # (entry e's fields are lines 1001e + 1 … 1001e + 1000)
    assert "K4096" not in frame.columns
    assert frame.get_column("@problem").to_list() == [None] * 4 + [
        "line 4101: field K4096 past the 4,096 distinct field names a piece of an export may hold: journald and "
        "the programs it logs for write some hundreds (forged or damaged)", None]
    # the last entry ends the file after a whole line, without its blank line: read, and marked
    assert frame.get_column("@unclosed").to_list() == [False] * 5 + [True]


def test_an_entry_past_journalds_field_limit_is_refused_and_keeps_no_more_fields() -> None:
    data = b"__REALTIME_TIMESTAMP=1\n" + b"".join(b"F%d=x\n" % k for k in range(100_000)) + b"\n"
    frame = _parse_chunk(np.frombuffer(data + bytes(16), dtype=np.uint8), len(data), True, 0, 0)
    assert frame.height == 1 and frame.width < MAX_FIELDS + 10  # a bounded number of columns
    assert frame.get_column("@problem")[0] == (f"line {MAX_FIELDS + 1}: more than {MAX_FIELDS} fields: journald "
                                               "writes no such entry (forged or damaged); its fields past that are "
                                               "not kept")


def test_count_newlines_and_bounds() -> None:
    data = np.frombuffer(b"a\nb\n\nc", dtype=np.uint8)
    assert [_export_scan.count_newlines(data, n) for n in (0, 2, 6)] == [0, 1, 3]
    with pytest.raises(ValueError, match="length 7 outside the 6-byte piece"):
        _export_scan.count_newlines(data, 7)
    with pytest.raises(ValueError, match="length -1 outside"):
        _export_scan.scan(data, -1, True, True, frozenset(), frozenset(), b"__CURSOR", frozenset(), 80)


def test_newline_positions_are_where_the_newlines_are() -> None:
    data = np.frombuffer(b"a\nb\n\nc" + b"\n" * 40 + b"x" * 100 + b"\n", dtype=np.uint8)
    for length in (0, 1, 2, 6, 30, len(data)):
        found = np.frombuffer(_export_scan.newline_positions(data, length), np.int64)
        assert found.tolist() == [i for i in range(length) if data[i] == 10]
    with pytest.raises(ValueError, match="length 200 outside"):
        _export_scan.newline_positions(data, 200)


@pytest.mark.parametrize("size", [15, 16, 17, 16 * 255, 16 * 255 + 1, 16 * 256 + 7, 100_003])
def test_count_newlines_counts_as_bytes_count_does(size: int) -> None:
    """The vector count agrees with `bytes.count` at every length around its 16-byte steps and its
    255-step sums, with nothing but newlines (each lane at its most) and with random bytes."""
    rng = np.random.default_rng(size)
    for data in (b"\n" * size, rng.choice(np.frombuffer(b"\nab=", dtype=np.uint8), size).tobytes()):
        array = np.frombuffer(data, dtype=np.uint8)
        for length in (size, size - 1, size // 2):
            assert _export_scan.count_newlines(array, length) == data[:length].count(b"\n")


@pytest.mark.parametrize("copy", [True, False], ids=["dense", "views"])
def test_coded_identifiers_keep_every_value_across_many_distinct_values(copy: bool) -> None:
    """A coded field's dictionary grows past its first table (2,000 distinct boot ids, some long,
    some not UTF-8), values come back in runs and out of them, repeated within an entry, and
    absent from some entries: every entry reads as the reference reads it."""
    rng = np.random.default_rng(7)
    boots = [b"%032x" % i for i in range(2000)] + [b"short", b"caf\xe9", "ünï".encode()]
    out = bytearray()
    for i in range(6000):
        out += b"__REALTIME_TIMESTAMP=%d\n" % i
        if rng.random() < 0.9:
            boot = boots[i // 7 % len(boots)] if rng.random() < 0.5 else boots[int(rng.integers(len(boots)))]
            out += b"_BOOT_ID=" + boot + b"\n"
            if rng.random() < 0.01:
                out += b"_BOOT_ID=" + boots[0] + b"\n"
        out += b"SYSLOG_IDENTIFIER=" + (b"sglang", b"kernel", b"systemd")[i % 3] + b"\n\n"
    data = bytes(out)
    assert comparable(scanned_entries(data, copy)) == comparable(reference_entries(data))


def test_the_scanner_holds_a_cursor_as_values_exactly_when_it_is_in_journalds_form() -> None:
    # the scanner's rule (C) and the rule for cursors readers give as text (a regular expression) agree
    data = b"".join(b"__CURSOR=" + cursor.encode() + b"\n\n" for cursor in CURSORS)
    frame = _parse_chunk(np.frombuffer(data + bytes(16), dtype=np.uint8), len(data), True, 0, 0)
    held = frame.get_column(PARSED[0]).is_not_null().to_list()
    assert held == [bool(re.fullmatch(JOURNALD_CURSOR.strip("^$"), c)) for c in CURSORS]
    assert held[:3] == [True] * 3 and not any(held[3:])
    # and what is held is written back byte for byte; the rest is kept as it came
    written = frame.select(pl.coalesce(pl.col("__CURSOR"), cursor_text(*map(pl.col, PARSED)))).to_series()
    assert written.to_list() == CURSORS


def test_the_scanner_holds_an_integer_as_a_number_exactly_when_it_is_plainly_written() -> None:
    data = b"".join(b"_PID=" + value.encode() + b"\n\n" for value in INTEGERS)
    frame = _parse_chunk(np.frombuffer(data + bytes(16), dtype=np.uint8), len(data), True, 0, 0)
    numbers = frame.get_column("@int _PID").to_list()
    assert numbers == [0, 6, 1781818487000000, 999999999999999999] + [None] * (len(INTEGERS) - 4)
    # what it did not read stays as it came, for the journal's rules to judge
    assert frame.get_column("_PID").to_list() == [None] * 4 + INTEGERS[4:]


def test_json_line_marks_count_as_polars_counts() -> None:
    """What the JSON reader asks of each line (how often `":`, `":"` and `": "` occur, whether a
    list or a null value does) is what polars' literal `count_matches` and `contains` answer, its
    way of not counting overlaps included, on lines made of the characters that make them."""
    rng = random.Random(7)
    alphabet = ['"', ":", " ", "[", "null", "n", "x", "\\", "{", "}", ","]
    lines = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40))) for _ in range(20_000)]
    lines += ['{"a\\":":"x"}', '":":":"', '": ": ": "', '{"MESSAGE": null}', '{"X":["a"]}']
    data = ("\n".join(lines) + "\n").encode()
    buf = np.frombuffer(data, np.uint8)
    ends = np.frombuffer(_export_scan.newline_positions(buf, len(buf)), np.int64)
    starts = np.concatenate(([0], ends[:-1] + 1)).astype(np.int64)
    keys, strings, other = _export_scan.json_line_marks(buf, starts, ends)
    text = pl.Series(lines)
    assert np.frombuffer(keys, np.int32).tolist() == text.str.count_matches('":', literal=True).to_list()
    assert np.frombuffer(strings, np.int32).tolist() == (text.str.count_matches('":"', literal=True)
                                                         + text.str.count_matches('": "', literal=True)).to_list()
    markers = ('":[', '": [', '":null', '": null')
    assert np.frombuffer(other, np.bool_).tolist() == pl.select(
        pl.any_horizontal(*[text.str.contains(m, literal=True) for m in markers])).to_series().to_list()
    with pytest.raises(ValueError, match="outside"):
        _export_scan.json_line_marks(buf, starts, ends + len(buf))
