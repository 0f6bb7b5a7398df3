"""Flight Recorder dumps built to hurt the reader: pickles of a few hundred bytes that stand for
gigabytes once written out (one string shared by reference, a list that holds itself), pickles
200,000 deep, lengths and memo indices of 2^64−1 and 10^8 in a file of a dozen bytes, JSON with
times of 10^30 ns, ranks that are no ranks, and lists where maps belong. Each is a quarantine row
with its reason; the rest of the dump and of the bundle is read, and a real-sized dump (8 ranks ×
2,000 entries with 20-frame stacks) is still read whole.

The pickles are written opcode by opcode (`pickletools` names them): `pickle.dumps` never writes
these shapes."""

from __future__ import annotations

import json
import pickle
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from forensics.case import read_bundle
from forensics.sources.flight_recorder import flight_recorder
from forensics.sources.flight_recorder.flight_recorder import parse
from tests.conftest import export_entry

T0 = 1_781_818_560_000_000_000  # 2026-06-18 21:36 UTC, in ns
REPO = Path(__file__).resolve().parents[2]
# What reading one hostile dump may add to the reader's memory. The attacks below stand for
# gigabytes, and took them before the bounds: they are read in a child process whose address space
# is capped a gigabyte above what it holds, so that a reader without bounds fails fast there
# (MemoryError) instead of taking the machine.
PEAK_BYTES = 128 << 20
CAP_BYTES = 1 << 30
PROBE = """
import json, resource, sys, time
from pathlib import Path
from forensics.sources.flight_recorder.flight_recorder import parse
def status(key):
    return int(next(line for line in open("/proc/self/status") if line.startswith(key)).split()[1]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (status("VmSize:") + int(sys.argv[2]), resource.RLIM_INFINITY))
before, started = status("VmRSS:"), time.perf_counter()
result = parse(Path(sys.argv[1]))
print(json.dumps({"seconds": time.perf_counter() - started, "peak": status("VmHWM:") - before,
                  "counts": [result.records, result.parsed, result.quarantine.height],
                  "reasons": result.quarantine.get_column("reason").to_list()}))
"""

# -- pickle opcodes ---------------------------------------------------------------------------------
PROTO4, STOP, MARK, MEMOIZE, POP = b"\x80\x04", b".", b"(", b"\x94", b"0"
EMPTY_DICT, EMPTY_LIST, APPEND, APPENDS, SETITEMS = b"}", b"]", b"a", b"e", b"u"


def text(value: str) -> bytes:
    """BINUNICODE: a string, not memoized."""
    raw = value.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def integer(value: int) -> bytes:
    """LONG1 (or LONG4 when wider than 255 bytes): any integer, however wide."""
    raw = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
    return (b"\x8a" + bytes([len(raw)]) if len(raw) < 256 else b"\x8b" + struct.pack("<i", len(raw))) + raw


def get(index: int) -> bytes:
    """BINGET / LONG_BINGET: push another reference to a memoized value."""
    return b"h" + bytes([index]) if index < 256 else b"j" + struct.pack("<I", index)


def mapping(*pairs: tuple[str, bytes]) -> bytes:
    return EMPTY_DICT + MARK + b"".join(text(key) + value for key, value in pairs) + SETITEMS


def shared(levels: int, fan: int, leaf: int) -> tuple[bytes, int]:
    """A string of `leaf` characters memoized once, then `levels` lists of `fan` references each to
    the one below: the top list, and how many characters of the string it holds once written out.
    Must be the first values the pickle memoizes (their memo indices are 0, 1, …)."""
    out = text("A" * leaf) + MEMOIZE
    for level in range(1, levels + 1):
        out += POP + EMPTY_LIST + MARK + get(level - 1) * fan + APPENDS + MEMOIZE  # only the top stays
    return out, leaf * fan**levels


def dump_pickle(*entries: bytes, before: bytes = b"") -> bytes:
    """A Flight Recorder dump: `before` (values to memoize first), then its keys with `entries`."""
    return (PROTO4 + before + (POP if before else b"") + EMPTY_DICT + MARK + text("version") + text("2.10")
            + text("pg_status") + EMPTY_DICT + text("pg_config") + EMPTY_DICT
            + text("entries") + EMPTY_LIST + MARK + b"".join(entries) + APPENDS + SETITEMS + STOP)


def entry_pickle(*pairs: tuple[str, bytes], created: int = T0) -> bytes:
    return mapping(("time_created_ns", integer(created)), ("profiling_name", text("nccl:all_reduce")),
                   ("collective_seq_id", integer(1)), *pairs)


# -- dumps as torch writes them -------------------------------------------------------------------------
# torch's pickler writes a string it has written before as a reference to it: its stacks' names and
# files are shared, as these are
NAMES = [f"layer_{i}_forward" for i in range(60)]
FILES = [f"/opt/venv/lib/python3.11/site-packages/model/module_{i}.py" for i in range(40)]


def entry(n: int, frames: int = 20, **fields: Any) -> dict[str, Any]:
    """Entry `n` as torch 2.x writes it, a 20-frame stack by default."""
    return {"record_id": n, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": n + 1,
            "p2p_seq_id": 0, "op_id": n + 1, "profiling_name": "nccl:all_reduce", "time_created_ns": T0 + n * 1_000_000,
            "duration_ms": 1.5, "input_sizes": [[4096, 1024]], "input_dtypes": ["Float"],
            "output_sizes": [[4096, 1024]], "output_dtypes": ["Float"], "state": "completed",
            "time_discovered_started_ns": T0 + n * 1_000_000 + 10, "time_discovered_completed_ns": None,
            "retired": True, "timeout_ms": 600_000, "is_p2p": False, "thread_id": "139977665080192",
            "thread_name": "python",
            "frames": [{"name": NAMES[(n + i) % 60], "filename": FILES[(n * 7 + i) % 40],
                        "line": 100 + (n * 13 + i) % 4000} for i in range(frames)],
            **fields}


def torch_dump(*entries: dict[str, Any], rank: int | None = 0, **fields: Any) -> dict[str, Any]:
    dump = {"version": "2.10",
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3, 4, 5, 6, 7]"}},
            "pg_status": {"0": {"last_enqueued_collective": 2, "last_started_collective": 2,
                                "last_completed_collective": 1}},
            "entries": list(entries)}
    if rank is not None:
        dump["rank"] = rank
    return {**dump, **fields}


def as_json(dump: dict[str, Any]) -> bytes:
    """The JSON form; integers of any width written out (json.dumps writes up to 4,300 digits)."""
    return json.dumps(dump).encode()


# -- reading ----------------------------------------------------------------------------------------
def refused_capped(path: Path) -> tuple[str, int, float]:
    """The reason the whole dump at `path` is one quarantine row, read in a child process capped at
    CAP_BYTES more memory; with what reading it added to the child's peak memory, and its seconds."""
    child = subprocess.run([sys.executable, "-c", PROBE, str(path), str(CAP_BYTES)], capture_output=True,
                           text=True, timeout=300, cwd=REPO, check=False)
    assert child.returncode == 0, child.stderr[-2000:]
    read = json.loads(child.stdout.splitlines()[-1])
    assert read["counts"] == [1, 0, 1], read
    return read["reasons"][0], read["peak"], read["seconds"]


def dump_file(tmp_path: Path, data: bytes, name: str = "nccl_trace_rank_0") -> Path:
    path = tmp_path / "flight_recorder" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def refused(path: Path) -> str:
    """The reason the whole dump is one quarantine row (and nothing else came of it)."""
    result = parse(path)
    assert (result.records, result.parsed, result.quarantine.height) == (1, 0, 1), result.quarantine
    row = result.quarantine.row(0, named=True)
    assert row["source_file"] == str(path) and row["excerpt"]
    return row["reason"]


def bundle_with(tmp_path: Path, name: str, data: bytes) -> tuple[dict[str, dict[str, Any]], list[tuple[str, str]]]:
    """A bundle of the dump at `flight_recorder/<name>` and a good journal export, read: the
    manifest's entries by path and the quarantine's (file, reason) rows."""
    bundle = tmp_path / "bundle"
    dump_file(bundle, data, name)
    (bundle / "journal.export").write_bytes(b"".join(export_entry(
        ("__REALTIME_TIMESTAMP", str(T0 // 1000 + i * 1_000_000)), ("_BOOT_ID", "0" * 32), ("_HOSTNAME", "gpu-node-00"),
        ("_SYSTEMD_UNIT", "train.service"), ("MESSAGE", f"step {i}")) for i in range(3)))
    frames, manifest = read_bundle(bundle)
    inputs = {e["path"]: e for e in manifest["inputs"]}
    for seen in inputs.values():
        assert "error" not in seen, seen
        assert seen["records"] == seen["parsed"] + seen["quarantined"], seen
    assert (inputs["journal.export"]["parsed"], inputs["journal.export"]["quarantined"]) == (3, 0)
    assert frames["events"].filter(frames["events"]["unit"] == "train.service").height == 3
    return inputs, frames["quarantine"].select("source_file", "reason").rows()


# -- 1. what a few hundred bytes stand for -------------------------------------------------------------
def test_a_string_shared_by_reference_is_refused_before_it_is_written_out(tmp_path: Path) -> None:
    """388 bytes: a 40-character string, then six lists of 20 references each to the one below,
    2.56 GB of text once written out. As the one entry (not a map), `str(entry)` built it for the
    quarantine excerpt: 2.8 GB and 25–35 s before the bounds."""
    bomb, expanded = shared(levels=6, fan=20, leaf=40)
    data = dump_pickle(bomb)  # the bomb is the one entry: not a map, so its text was the excerpt
    assert len(data) < 400 and expanded > 2_500_000_000
    reason, peak, seconds = refused_capped(dump_file(tmp_path, data))
    assert "MAX_TEXT_BYTES" in reason and f"{flight_recorder.MAX_TEXT_BYTES:,} bytes" in reason
    assert peak < PEAK_BYTES and seconds < 10, (peak, seconds)


def test_shared_sizes_are_refused_before_they_become_json(tmp_path: Path) -> None:
    """The same 2.56 GB as an entry's sizes: `json.dumps` and the message made of it took all 23 GB
    of the machine before the bounds (the kernel's OOM killer ended it after 77 s)."""
    bomb, expanded = shared(levels=6, fan=20, leaf=40)
    data = dump_pickle(entry_pickle(("input_sizes", get(6))), before=bomb)
    assert len(data) < 600 and expanded > 2_500_000_000
    reason, peak, seconds = refused_capped(dump_file(tmp_path, data))
    assert "MAX_TEXT_BYTES" in reason
    assert peak < PEAK_BYTES and seconds < 10, (peak, seconds)


def test_a_list_that_holds_itself_is_refused_not_a_crash(tmp_path: Path) -> None:
    """`input_sizes` a list whose one item is itself: `json.dumps` raised `ValueError: Circular
    reference detected` and the bundle's ingest stopped with it."""
    loop = EMPTY_LIST + MEMOIZE + get(0) + APPEND
    inputs, reasons = bundle_with(tmp_path, "nccl_trace_rank_0", dump_pickle(entry_pickle(("input_sizes", loop))))
    dump = inputs["flight_recorder/nccl_trace_rank_0"]
    assert (dump["records"], dump["parsed"], dump["quarantined"]) == (1, 0, 1)
    assert any("or holding themselves (MAX_DEPTH)" in r for f, r in reasons if f.startswith("flight_recorder/"))


def test_references_past_the_value_bound_are_counted_not_walked(tmp_path: Path) -> None:
    """Sizes of two lists of 5,000 references: 25 million values from a 20 KB file, 125 MB as JSON
    and again in the message (1.9 GB and 8 s before the bounds). The walk counts a list's items
    before it visits them, and stops at the 10 millionth."""
    data = dump_pickle(entry_pickle(("input_sizes", get(2))), before=(
        b"N" + MEMOIZE + POP + EMPTY_LIST + MARK + get(0) * 5000 + APPENDS + MEMOIZE + POP
        + EMPTY_LIST + MARK + get(1) * 5000 + APPENDS + MEMOIZE))
    reason, peak, seconds = refused_capped(dump_file(tmp_path, data))
    assert "more than 10,000,000 values" in reason and "MAX_OBJECTS" in reason
    assert peak < PEAK_BYTES and seconds < 20, (peak, seconds)


def test_more_entries_than_any_ring_holds_are_refused(tmp_path: Path) -> None:
    """One entry referenced 60,000 times: 60,000 rows from 120 KB."""
    data = dump_pickle(get(0) * 60_000, before=entry_pickle() + MEMOIZE)
    assert "60,000 entries: more than MAX_ENTRIES (50,000)" in refused(dump_file(tmp_path, data))


def test_a_process_groups_ranks_repeated_on_every_row_are_held_to_the_text_bound(tmp_path: Path) -> None:
    """A group's ranks of 190 KB are written on each of its 2,000 rows: 380 MB of text in the frame
    polars makes (0.8 GB to read before the bounds), from a 1.4 MB dump (JSON: no sharing needed)."""
    dump = torch_dump(*(entry(n, frames=0) for n in range(2000)))
    dump["pg_config"]["0"]["ranks"] = "[" + ", ".join(map(str, range(30_000))) + "]"
    reason, peak, seconds = refused_capped(dump_file(tmp_path, as_json(dump), "nccl_trace_rank_0.json"))
    assert "its rows would hold more than 268,435,456 bytes of text" in reason
    assert peak < PEAK_BYTES and seconds < 20, (peak, seconds)


def test_an_integer_too_long_to_write_is_refused(tmp_path: Path) -> None:
    """A size of 5,000 digits (LONG4): `json.dumps` raised ValueError (Python writes 4,300 at most)."""
    data = dump_pickle(entry_pickle(("input_sizes", EMPTY_LIST + integer(10**5000) + APPEND)))
    assert "more than 4,300 digits (MAX_INT_DIGITS)" in refused(dump_file(tmp_path, data))


def test_a_file_larger_than_any_dump_is_left_unread(tmp_path: Path) -> None:
    data = dump_pickle(entry_pickle(("state", text("x" * flight_recorder.MAX_PICKLE_BYTES))))
    assert "more than MAX_PICKLE_BYTES (33,554,432), left unread" in refused(dump_file(tmp_path, data))
    data = as_json(torch_dump(entry(0, state="x" * flight_recorder.MAX_JSON_BYTES)))
    assert "more than MAX_JSON_BYTES (67,108,864), left unread" in refused(dump_file(tmp_path, data, "rank_0.json"))


@pytest.mark.parametrize("container", [EMPTY_DICT, b"\x8f"])  # an empty set is 216 bytes from one byte
def test_millions_of_containers_are_refused_before_they_are_made(tmp_path: Path, container: bytes) -> None:
    """2.1 million empty sets from a 2 MB file took 0.5 GB before the bounds (a 32 MB file: 7 GB)."""
    data = dump_pickle(entry_pickle(("input_dtypes", EMPTY_LIST + MARK + container * 2_100_000 + APPENDS)))
    reason, peak, _ = refused_capped(dump_file(tmp_path, data))
    assert "more than 2,000,000 lists, dicts, tuples and sets (MAX_CONTAINERS)" in reason
    assert peak < PEAK_BYTES, peak


# -- 2. what used to stop the ingest with a traceback -----------------------------------------------------
def test_a_pickle_200_thousand_deep_is_a_quarantine_row(tmp_path: Path) -> None:
    """200,000 nested lists as sizes: `json.dumps` raised RecursionError out of the ingest."""
    deep = EMPTY_LIST * 200_000 + APPEND * 199_999
    inputs, reasons = bundle_with(tmp_path, "nccl_trace_rank_0", dump_pickle(entry_pickle(("input_sizes", deep))))
    assert inputs["flight_recorder/nccl_trace_rank_0"]["quarantined"] == 1
    assert any("nested more than 32 deep" in r for f, r in reasons if f.startswith("flight_recorder/"))


@pytest.mark.parametrize("opcode, name", [(b"\x95", "FRAME"), (b"\x8d", "BINUNICODE8"), (b"\x8e", "BINBYTES8"),
                                          (b"\x96", "BYTEARRAY8")])
def test_a_length_of_2_64_minus_1_is_a_quarantine_row(tmp_path: Path, opcode: bytes, name: str) -> None:
    """A 12-byte pickle whose length field says 2^64−1: the unpickler raised OverflowError out of
    the ingest (2^62: MemoryError)."""
    data = PROTO4 + opcode + b"\xff" * 8 + text("pg_status") + STOP
    inputs, reasons = bundle_with(tmp_path, "nccl_trace_rank_0", data)
    assert inputs["flight_recorder/nccl_trace_rank_0"]["quarantined"] == 1
    (reason,) = [r for f, r in reasons if f.startswith("flight_recorder/")]
    assert "18,446,744,073,709,551,615 bytes at byte 2, in a file of" in reason, name


def test_a_memo_index_of_a_hundred_million_is_refused_before_the_unpickler_sizes_its_memo(tmp_path: Path) -> None:
    """LONG_BINPUT 10^8 in a 20-byte file: the C unpickler grew its memo to 2·10^8 slots, 1.6 GB."""
    data = PROTO4 + text("pg_status") + b"r" + struct.pack("<I", 100_000_000) + STOP
    reason, peak, _ = refused_capped(dump_file(tmp_path, data))
    assert "memo index 100,000,000" in reason and "beyond any the file could fill" in reason
    assert peak < PEAK_BYTES, peak


def test_the_opcode_check_keeps_step_with_every_protocol(tmp_path: Path) -> None:
    """Real pickles of every protocol, holding every kind of plain value, pass the check; the same
    with a memo index of 10^8 planted before their STOP do not (so the check read every opcode
    before it where the unpickler reads it)."""
    value = {"s": "x" * 300, "b": b"y" * 300, "ba": bytearray(b"z" * 10), "i": [0, 255, 65535, 2**31, -2**63, 2**200],
             "f": 1.5, "n": None, "t": (True, False), "tuples": [(), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4)],
             "set": {1, 2}, "frozen": frozenset({3}), "many": [[i] for i in range(400)], "shared": ["same"] * 3}
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        data = pickle.dumps(value, protocol=protocol)
        assert flight_recorder._pickle_problem(data) is None, protocol
        planted = data[:-1] + b"r" + struct.pack("<I", 100_000_000) + STOP
        assert "memo index 100,000,000" in (flight_recorder._pickle_problem(planted) or ""), protocol


def test_entries_with_times_outside_1970_to_2199_are_quarantined_and_the_rest_read(tmp_path: Path) -> None:
    """Times of 10^30 and −10^30 ns: polars could not make them dates and the ingest stopped."""
    dump = torch_dump(entry(0), entry(1, time_created_ns=10**30), entry(2, time_created_ns=-(10**30)),
                      entry(3, time_created_ns=2**63 - 1), entry(4))
    inputs, reasons = bundle_with(tmp_path, "nccl_trace_rank_0.json", as_json(dump))
    got = inputs["flight_recorder/nccl_trace_rank_0.json"]
    assert (got["records"], got["parsed"], got["quarantined"]) == (5, 2, 3)
    outside = [r for f, r in reasons if "outside 1970–2199" in r]
    assert len(outside) == 3 and any(f"time_created_ns {10**30} " in r for r in outside)


@pytest.mark.parametrize("rank", [-5, 2**31, 2**40, 10**30, "3", [0]])
def test_a_rank_that_is_no_rank_is_a_quarantine_row_and_the_entries_are_read(tmp_path: Path, rank: Any) -> None:
    data = as_json(torch_dump(entry(0), entry(1), rank=rank))
    inputs, reasons = bundle_with(tmp_path, "nccl_trace_rank_0.json", data)
    got = inputs["flight_recorder/nccl_trace_rank_0.json"]
    assert (got["records"], got["parsed"], got["quarantined"]) == (3, 2, 1)
    (reason,) = [r for f, r in reasons if f.startswith("flight_recorder/")]
    assert "is not a rank (0–2,147,483,647): its entries are read with the rank unknown" in reason


def test_a_pickled_rank_that_is_no_rank_leaves_the_rows_without_one(tmp_path: Path) -> None:
    path = dump_file(tmp_path, pickle.dumps(torch_dump(entry(0), rank=-1)), "nccl_trace_rank_3")
    result = parse(path)
    assert (result.records, result.parsed, result.quarantine.height) == (2, 1, 1)
    assert result.rows.get_column("FR_RANK").to_list() == [None]  # not the 3 of the name: the dump said otherwise


@pytest.mark.parametrize("where, reason", [
    ({"entries": [[1, 2], "x", 7]}, "an entry that is not a map"),
    ({"pg_status": [1, 2]}, "pg_status is not a map of process groups"),
    ({"pg_status": {"0": [1, 2]}}, "pg_status of process group '0': not a map"),
    ({"pg_status": {"0": {"last_enqueued_collective": [2]}}},
     "its last_enqueued_collective [2] is not a sequence number"),
    ({"pg_status": {"0": {"last_completed_collective": 10**30}}}, "is not a sequence number"),
    ({"pg_config": [1, 2]}, "pg_config is not a map of process groups"),
    ({"pg_config": {"0": "[0, 1]"}}, "pg_config of process group '0': not a map"),
    ({"entries": [{**entry(5), "frames": 7}]}, "frames is not a list of frames: 7"),
    ({"entries": [entry(5, retired=[1])]}, "retired is [1], not true or false"),
    ({"entries": [entry(5, collective_seq_id=10**30)]}, f"collective_seq_id {10**30} does not fit 64 bits"),
    ({"entries": [entry(5, timeout_ms=-(2**64))]}, "does not fit 64 bits"),
])
def test_a_list_where_a_map_belongs_is_a_quarantine_row_and_the_rest_read(
        tmp_path: Path, where: dict[str, Any], reason: str) -> None:
    good = [entry(0), entry(1)]
    dump = torch_dump(*good, **where)
    if "entries" in where:
        dump["entries"] = good + where["entries"]
    inputs, reasons = bundle_with(tmp_path, "nccl_trace_rank_0.json", as_json(dump))
    got = inputs["flight_recorder/nccl_trace_rank_0.json"]
    assert got["parsed"] == 2 and got["quarantined"] >= 1
    assert any(reason in r for f, r in reasons if f.startswith("flight_recorder/")), reasons


def test_sizes_a_pickle_cannot_write_as_json_quarantine_their_entry(tmp_path: Path) -> None:
    """A set and bytes as sizes (a pickle holds them; JSON does not): json.dumps raised TypeError."""
    path = dump_file(tmp_path, pickle.dumps(torch_dump(entry(0), entry(1, input_sizes={1, 2}),
                                                       entry(2, output_sizes=[b"\x00"]))))
    result = parse(path)
    assert (result.records, result.parsed, result.quarantine.height) == (3, 1, 2)
    assert all("sizes are not JSON" in r for r in result.quarantine.get_column("reason"))


# -- what must still be read ---------------------------------------------------------------------------
def test_eight_ranks_of_2000_entries_with_20_frame_stacks_are_read_whole(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    for rank in range(8):
        dump = torch_dump(*(entry(n) for n in range(2000)), rank=rank)
        dump["pg_status"]["0"] = {"last_enqueued_collective": 2000, "last_started_collective": 2000,
                                  "last_completed_collective": 1999}
        # torch's own dumps share repeated strings by reference (its pickler memoizes them), as pickle.dumps does
        dump_file(bundle, pickle.dumps(dump, protocol=2) if rank % 2 else as_json(dump),
                  f"nccl_trace_rank_{rank}" + ("" if rank % 2 else ".json"))
    frames, manifest = read_bundle(bundle)
    assert [(e["parsed"], e["quarantined"]) for e in manifest["inputs"]] == [(2000, 0)] * 8
    assert frames["events"].height == 16_000 and frames["quarantine"].height == 0
    assert sorted(frames["events"].get_column("FR_RANK").unique().to_list()) == [str(r) for r in range(8)]


def test_a_real_sized_dump_passes_with_a_tenth_of_each_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each bound is at least ten times what a 2,000-entry rank with 20-frame stacks needs."""
    dump = torch_dump(*(entry(n) for n in range(2000)))
    paths = [dump_file(tmp_path, pickle.dumps(dump, protocol=2)),
             dump_file(tmp_path, as_json(dump), "nccl_trace_rank_0.json")]
    for name in ("MAX_PICKLE_BYTES", "MAX_JSON_BYTES", "MAX_CONTAINERS", "MAX_OBJECTS", "MAX_TEXT_BYTES",
                 "MAX_ENTRIES"):
        monkeypatch.setattr(flight_recorder, name, getattr(flight_recorder, name) // 10)
    monkeypatch.setattr(flight_recorder, "MAX_DEPTH", flight_recorder.MAX_DEPTH // 4)
    for path in paths:
        result = parse(path)
        assert (result.records, result.parsed, result.quarantine.height) == (2000, 2000, 0), path


def test_torchfrtrace_text_with_a_sequence_number_of_5000_digits_quarantines_its_block(tmp_path: Path) -> None:
    """torchfrtrace's text pasted with a forged sequence number: `int()` raised ValueError (more than
    4,300 digits) out of the ingest. Its block's lines are quarantined; the other block is read."""
    text_dump = ("Not all ranks joining collective, sequence number: 4\ngroup info: 0:default_pg\n"
                 "collective: nccl:all_reduce\nmissing ranks: {1}\n"
                 f"Collective {'9' * 5000} at entry 4 errors\ngroup info: 0:default_pg\ncollective: nccl:broadcast\n")
    inputs, reasons = bundle_with(tmp_path, "frtrace.txt", text_dump.encode())
    got = inputs["flight_recorder/frtrace.txt"]
    assert (got["format"], got["parsed"], got["quarantined"]) == ("flight_recorder_text", 1, 3)
    assert any(r.startswith("sequence number 9999") and "does not fit 64 bits" in r for f, r in reasons)
