"""PyTorch Flight Recorder dumps: what each rank's process groups recorded of their last collectives.

torch writes one file per rank when a collective times out (`TORCH_FR_DUMP_TEMP_FILE`, formerly
`TORCH_NCCL_DEBUG_INFO_TEMP_FILE`, plus the rank: `nccl_trace_rank_3`), or on request
(`torch._C._distributed_c10d._dump_fr_trace()`; `_dump_fr_trace_json()` for the JSON form). Both
forms hold a dict: `version` ("2.x"), `pg_config` (each process group's name, description and
ranks), `pg_status` (per group the last enqueued, started and completed collective), and
`entries`: one per recorded collective with `pg_id`, `process_group` (name, description),
`collective_seq_id` / `p2p_seq_id`, `profiling_name` (`nccl:all_reduce`, `gloo:broadcast`), `state`
(scheduled, started, completed), `retired`, sizes and dtypes, `timeout_ms`, `time_created_ns` and
the Python `frames` that issued it.

The pickle is read by an unpickler that builds plain data only (dicts, lists, tuples, strings,
numbers) and refuses every class and function a pickle can name: a dump is evidence, and
evidence never runs. Each entry is one `events` row at its `time_created_ns` (`data_type`
`torch:flight_recorder`), its fields in `FR_*` columns; the dump's rank comes from its own `rank`
key, else from the digits that end its file name. A dump holds no time of its own: the file's
modification time, when it is not before the dump's last entry, says when it was written
(`FR_DUMPED_AT`, ns) — how long the last collective had waited by then. `FR_JOB` names the job the
dump belongs to: its folder and file-name prefix (`decode/nccl_trace_rank_`), since two jobs each
have a rank 0 in a process group 0. `forensics.detect.collectives` puts the ranks side by side.

A dump is read as hostile input. A pickle shares what it repeats (a string memoized once and
referenced a thousand times), so a few hundred bytes can stand for gigabytes once its values are
written out as text or JSON, or refer to itself for ever. So before anything is built from a dump:
the file is at most `MAX_PICKLE_BYTES` or `MAX_JSON_BYTES`; a pickle's opcodes are checked before the unpickler runs (no
memo index, length or frame beyond the file, at most `MAX_CONTAINERS` containers); the value read is
walked once, every reference counted as the copy it becomes, against `MAX_OBJECTS`,
`MAX_TEXT_BYTES`, `MAX_DEPTH` and `MAX_INT_DIGITS`; and its entries against `MAX_ENTRIES`. A dump
past any bound is one quarantine row naming it. Inside a dump, an entry that is not a map, or whose
time is outside 1970–2199, or whose numbers do not fit 64 bits, is a quarantine row of its own; so
is a rank outside 0–2³¹−1 and a `pg_status` / `pg_config` that is not a map of maps. The rest of the
dump is read.
"""

from __future__ import annotations

import io
import json
import mmap
import pickle
import re
import reprlib
import sys
from collections.abc import Iterator
from itertools import chain
from pathlib import Path
from typing import Any

import polars as pl

from forensics.sources.journal.fields import LATEST_REALTIME_US
from forensics.sources.common.rawio import read_all
from forensics.sources.common.schema import (EVENTS_SCHEMA, EXCERPT_CHARS, QUARANTINE_SCHEMA, ParseResult, as_events, empty,
                                      excerpt_text, quarantine_rows)
from forensics.sources import register

NAME = "flight_recorder"
FORMAT = "flight_recorder"
DATA_TYPE = "torch:flight_recorder"
_KEYS = (b"pg_status", b"pg_config", b"collective_seq_id")
_RANK_IN_NAME = re.compile(r"(\d+)(?:\.[A-Za-z]+)?$")
# A file's modification time is taken from the kernel's coarse clock (its last tick, some
# milliseconds behind the clock torch stamps entries with): a dump written right after its last
# entry can look a few milliseconds older than it.
FILE_CLOCK_SLACK_NS = 100_000_000

# What one dump may hold. torch keeps a ring of 2,000 entries per rank by default
# (TORCH_FR_BUFFER_SIZE); such a rank with 20-frame Python stacks is ~1.2 MB pickled, ~6 MB as JSON,
# ~60 thousand containers, ~380 thousand values and ~7 MB of text once every shared reference is
# counted. Each bound is ten times that or more, and low enough that what is built from a dump at
# the bound (its rows, their text, the frames polars makes of them) stays in the hundreds of
# megabytes, never gigabytes.
#: The file, read whole: beyond it, a dump is refused unread. What the unpickler builds is up to 16×
#: the file (a memo slot per opcode byte, a 28-byte int per 3), JSON's parser up to 12×, once
#: containers are bounded below: half a gigabyte at most either way.
MAX_PICKLE_BYTES = 32 << 20
MAX_JSON_BYTES = 64 << 20
#: Lists, dicts, tuples and sets the file makes, before any is shared (~28 per entry): checked on the
#: pickle's opcodes or the JSON's brackets before they are made (an empty set is 216 bytes made of
#: one opcode byte).
MAX_CONTAINERS = 2_000_000
#: Values in the dump, a shared one counted at each reference (~190 per entry with a 20-frame stack;
#: walking ten million takes a few seconds).
MAX_OBJECTS = 10_000_000
#: Bytes of text the dump makes once written out (its strings and bytes, its numbers as digits), a
#: shared value counted at each reference: what any text or JSON made of it can hold. The rows built
#: from a dump are held to it too (each row repeats its process group's ranks and the dump's version).
MAX_TEXT_BYTES = 256 << 20
#: Containers inside containers: a dump nests 5 deep (dump, entries, entry, frames, frame); a value
#: that holds itself is infinitely deep. Far below Python's recursion limit, which `json.dumps`,
#: `str` and polars run into.
MAX_DEPTH = 32
#: Digits of an integer: Python writes none longer (`sys.int_info.default_max_str_digits`), so `str`
#: and `json.dumps` would fail on it. A time, rank or sequence number past 64 bits costs only its
#: entry (or its part of the dump); an integer too long to write costs the dump.
MAX_INT_DIGITS = sys.int_info.default_max_str_digits
#: Entries in one dump: 25× torch's default ring. Each becomes a row of some kilobytes.
MAX_ENTRIES = 50_000
#: c10d ranks are C++ ints.
MAX_RANK = 2**31 - 1
_INT64 = range(-(2**63), 2**63)
_TWO_64 = 2**64
_MAX_INT_BITS = int(MAX_INT_DIGITS * 3.3219)  # log2(10) < 3.3219: no more digits than MAX_INT_DIGITS
_TOO_MUCH_TEXT = (f"more than {MAX_TEXT_BYTES:,} bytes once written out as text, shared values counted at each "
                  "reference (MAX_TEXT_BYTES)")
# entry times past 2200-01-01 (ns) are damaged or forged, as the journal's are, and overflow date arithmetic
_LATEST_NS = LATEST_REALTIME_US * 1000
_DECIMAL = re.compile(r"-?[0-9]{1,19}")
_STATUS_KEYS = ("last_enqueued_collective", "last_started_collective", "last_completed_collective")

# The pickle's opcodes, as far as checking them needs: the C unpickler sizes its memo by the largest
# index a PUT names (an index of 10⁸ in a 9-byte file costs 1.6 GB before any object exists),
# allocates a counted string or bytes at the length the file claims, and makes a 200-byte set of
# one opcode byte.
_STOP, _FRAME, _PUT, _LONG_BINPUT = ord("."), 0x95, ord("p"), ord("r")
#: opcodes that make a new list, dict, tuple or set (the empty tuple is one shared object)
_MAKES_CONTAINER = frozenset(b"]}ltd\x85\x86\x87\x8f\x91")
#: opcodes followed by an argument of a fixed number of bytes (none for most)
_FIXED = {**dict.fromkeys(b"(N\x88\x89ae)su\x90021\x94\x93Rbo\x81\x92\x97\x98Q.", 0),
          **dict.fromkeys(_MAKES_CONTAINER, 0), **dict.fromkeys(b"Khq\x82\x80", 1), **dict.fromkeys(b"M\x83", 2),
          **dict.fromkeys(b"Jjr\x84", 4),
          **dict.fromkeys(b"G\x95", 8)}
#: opcodes followed by a length of 1, 4 or 8 bytes, then that many bytes
_COUNTED = {**dict.fromkeys(b"\x8aUC\x8c", 1), **dict.fromkeys(b"\x8bTBX", 4), **dict.fromkeys(b"\x8e\x96\x8d", 8)}
#: opcodes followed by lines of text (protocol 0)
_LINES = {**dict.fromkeys(b"ILSVFgpP", 1), **dict.fromkeys(b"ci", 2)}


def _run(containers: bool) -> re.Pattern[bytes]:
    """Runs of opcodes of fixed size that need no look of their own: one regular expression skips
    them (a rank's dump is half a million opcodes: a Python step for each would double the time to
    read it). LONG_BINPUT is in them below index 2^20 (a memo of 16 MB at most, whatever the file)."""
    looked_at = {_STOP, _FRAME, _LONG_BINPUT} | (set() if containers else _MAKES_CONTAINER)
    sizes: dict[int, list[int]] = {}
    for op, size in _FIXED.items():
        if op not in looked_at:
            sizes.setdefault(size, []).append(op)
    parts = [b"[" + b"".join(re.escape(bytes([op])) for op in sorted(ops)) + b"]" + b"." * size
             for size, ops in sorted(sizes.items())]
    return re.compile(b"(?:" + b"|".join([*parts, b"r..[\x00-\x0f]\x00"]) + b")*+", re.DOTALL)


_RUN, _RUN_WITH_CONTAINERS = _run(containers=False), _run(containers=True)
_MAKES_CONTAINER_BYTES = [bytes([op]) for op in sorted(_MAKES_CONTAINER)]


class _PlainData(pickle.Unpickler):
    """Builds only what pickle makes without naming a class; any class or function is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused to load {module}.{name}: a Flight Recorder dump holds plain data only")


class _Short(reprlib.Repr):
    """A value written in a few dozen characters at most, however large or deep: a quarantine excerpt."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxdict, self.maxlist, self.maxtuple = 3, 4, 6, 6
        self.maxstring = self.maxother = self.maxlong = EXCERPT_CHARS

    def repr_bytes(self, value: bytes, level: int) -> str:
        # reprlib writes bytes in full before cutting them
        return repr(value[:self.maxstring]) + ("..." if len(value) > self.maxstring else "")

    repr_bytearray = repr_bytes


_short = _Short().repr


def sniff(head: bytes, path: Path) -> bool:
    """A pickle (protocol 2+) or a JSON object naming Flight Recorder's keys in its first 4 KiB."""
    if path.is_dir() or not head:
        return False
    if head[:1] == b"\x80":
        return any(key in head for key in _KEYS)
    return head.lstrip()[:1] == b"{" and b'"entries"' in head and any(b'"' + k + b'"' in head for k in _KEYS)


def _pickle_problem(data: bytes) -> str | None:
    """Why the C unpickler must not be run on `data` (a memo index, a length or a frame the file
    cannot hold, more containers than MAX_CONTAINERS), or None. Opcodes the unpickler refuses by
    itself (unknown ones, a pickle cut short) are left to it."""
    # every container opcode is one of these bytes: when they are few, containers need no counting
    count_containers = sum(data.count(op) for op in _MAKES_CONTAINER_BYTES) > MAX_CONTAINERS
    size, at, containers = len(data), 0, 0
    run = (_RUN if count_containers else _RUN_WITH_CONTAINERS).match
    while True:
        at = run(data, at).end()
        if at >= size:
            return None
        op = data[at]
        at += 1
        if op == _STOP:
            return None
        if op in _MAKES_CONTAINER:  # only when they are not in the runs
            containers += 1
            if containers > MAX_CONTAINERS:
                return f"more than {MAX_CONTAINERS:,} lists, dicts, tuples and sets (MAX_CONTAINERS)"
        elif op == _LONG_BINPUT or op == _FRAME:
            width = 4 if op == _LONG_BINPUT else 8
            number = int.from_bytes(data[at:at + width], "little")
            at += width
            # a pickler numbers its memo from 0, one index per opcode at most
            if op == _LONG_BINPUT and number > at:
                return f"memo index {number:,} at byte {at - 5:,}, beyond any the file could fill"
            if op == _FRAME and number > size - at:
                return f"a frame of {number:,} bytes at byte {at - 9:,}, in a file of {size:,} bytes"
        elif op in _COUNTED:
            width = _COUNTED[op]
            length = int.from_bytes(data[at:at + width], "little")
            if length > size - at - width:
                return f"a value of {length:,} bytes at byte {at - 1:,}, in a file of {size:,} bytes"
            at += width + length
        elif op in _LINES:
            for _ in range(_LINES[op]):
                end = data.find(b"\n", at)
                if end < 0:
                    return None
                number_text = data[at:end].strip()
                if op == _PUT and number_text.isdigit() and (len(number_text) > 20 or int(number_text) > at):
                    return f"memo index {number_text[:20].decode()} at byte {at - 1:,}, beyond any the file could fill"
                at = end + 1
        else:
            return None  # not an opcode: the unpickler says so


def _beyond_bounds(dump: Any) -> str | None:
    """Which bound `dump` crosses, or None: one walk with an explicit stack (of what is being walked,
    never deeper than MAX_DEPTH), every reference to a shared value counted as the copy it becomes in
    any text or JSON made of it. A container's items are counted before any is visited: a list of
    more references than MAX_OBJECTS stops the walk before it visits one."""
    objects, text = 1, 0
    stack: list[Iterator[Any]] = [iter((dump,))]
    while stack:
        for value in stack[-1]:
            kind = type(value)
            if kind is str:
                text += len(value) + 4  # quotes and a separator, as JSON writes it
            elif kind is int:
                if -_TWO_64 < value < _TWO_64:
                    text += 21  # its digits and sign at most
                elif value.bit_length() > _MAX_INT_BITS:
                    return (f"an integer of {value.bit_length():,} bits: more than {MAX_INT_DIGITS:,} digits "
                            "(MAX_INT_DIGITS)")
                else:
                    text += value.bit_length() // 3 + 2  # its digits (log10 2 < 1/3) and sign
            elif kind is dict or kind is list or kind is tuple or kind is set or kind is frozenset:
                objects += 2 * len(value) if kind is dict else len(value)
                text += 2
                if objects > MAX_OBJECTS:
                    return f"more than {MAX_OBJECTS:,} values, shared ones counted at each reference (MAX_OBJECTS)"
                if text > MAX_TEXT_BYTES:
                    return _TOO_MUCH_TEXT
                if len(stack) > MAX_DEPTH:
                    return f"values nested more than {MAX_DEPTH} deep, or holding themselves (MAX_DEPTH)"
                stack.append(chain.from_iterable(value.items()) if kind is dict else iter(value))
                break
            elif kind is bytes or kind is bytearray:
                text += 4 * len(value)  # each byte may take a \xNN
            elif kind is float:
                text += 24  # at its longest
            else:
                text += 6  # null, true, false
        else:
            stack.pop()
    return _TOO_MUCH_TEXT if text > MAX_TEXT_BYTES else None


def _load(data: bytes | mmap.mmap) -> dict[str, Any] | str:
    """The dump as plain data within the bounds, or why it cannot be read."""
    pickled = data[:1] == b"\x80"
    limit, name = (MAX_PICKLE_BYTES, "MAX_PICKLE_BYTES") if pickled else (MAX_JSON_BYTES, "MAX_JSON_BYTES")
    if len(data) > limit:
        return f"a dump of {len(data):,} bytes: more than {name} ({limit:,}), left unread"
    data = bytes(data)  # at most the bound: bytes' count and find are what the checks below need
    if pickled:
        problem = _pickle_problem(data)
    else:  # an upper bound: brackets inside strings are counted too
        containers = data.count(b"{") + data.count(b"[")
        problem = (f"more than {MAX_CONTAINERS:,} objects and arrays (MAX_CONTAINERS)"
                   if containers > MAX_CONTAINERS else None)
    if problem:
        return f"not a readable Flight Recorder dump: {problem}"
    try:
        if pickled:
            dump = _PlainData(io.BytesIO(data)).load()
        else:
            dump = json.loads(data.decode("utf-8", "replace"))
    except RecursionError:
        return "not a readable Flight Recorder dump: nested too deeply"
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError,
            OverflowError, MemoryError) as error:
        return f"not a readable Flight Recorder dump: {type(error).__name__}: {error}"[:300]
    problem = _beyond_bounds(dump)
    if problem:
        return f"a Flight Recorder dump past its bounds: {problem}"
    if not isinstance(dump, dict) or not isinstance(dump.get("entries"), list):
        return "not a Flight Recorder dump: no list of entries"
    if len(dump["entries"]) > MAX_ENTRIES:
        return f"a Flight Recorder dump of {len(dump['entries']):,} entries: more than MAX_ENTRIES ({MAX_ENTRIES:,})"
    return dump


def _refused(path: Path, reason: str, excerpt: str) -> ParseResult:
    """The whole file as one quarantine row."""
    quarantine = pl.DataFrame({"source_file": [str(path)], "format": [FORMAT], "offset": [0], "line": [None],
                               "reason": [reason], "excerpt": [excerpt_text(excerpt)], "subject": [None]}
                              ).cast(dict(QUARANTINE_SCHEMA))  # type: ignore[arg-type]
    return ParseResult("events", empty(EVENTS_SCHEMA), quarantine, 1)


def _rank(dump: dict[str, Any], path: Path) -> tuple[int | None, list[tuple[str, str]], list[str]]:
    """The dump's rank, the quarantine row of a rank that is none, and a note when it is unknown.
    A rank the dump states but that is not one leaves it unknown: the file name is not asked then."""
    stated = dump.get("rank")
    if stated is not None:
        if type(stated) is int and 0 <= stated <= MAX_RANK:
            return stated, [], []
        return None, [(f"the dump's rank {_short(stated)} is not a rank (0–{MAX_RANK:,}): its entries are read "
                       "with the rank unknown", f"rank: {_short(stated)}")], []
    found = _RANK_IN_NAME.search(path.name)
    if not found:
        return None, [], ["the dump's rank is neither in it nor at the end of its file name"]
    if int(found[1]) > MAX_RANK:
        return None, [], [f"the digits that end the dump's file name ({found[1][:40]}) are no rank "
                          f"(0–{MAX_RANK:,}): its rank is unknown"]
    return int(found[1]), [], []


def _sequence_number(value: Any) -> int | None:
    """A group's last enqueued / started / completed collective as a number (the JSON form writes it
    as text), None when absent; ValueError when it is none (the collectives' detector reads it back
    as a 64-bit integer)."""
    if type(value) is str and _DECIMAL.fullmatch(value):
        value = int(value)
    if value is not None and (type(value) is not int or value not in _INT64):
        raise ValueError(value)
    return value


def _groups(dump: dict[str, Any], key: str) -> tuple[dict[Any, dict[str, Any]], list[tuple[str, str]]]:
    """`pg_status` or `pg_config`: each process group's map, and one quarantine row for what in it
    is not one (the section itself, or its groups that are not maps or hold numbers that are not
    sequence numbers, named with their count); the other groups are kept."""
    section = dump.get(key)
    if section is None:
        return {}, []
    if not isinstance(section, dict):
        return {}, [(f"{key} is not a map of process groups: {_short(section)}: not read",
                     f"{key}: {_short(section)}")]
    kept: dict[Any, dict[str, Any]] = {}
    bad: list[tuple[Any, str]] = []
    for group, value in section.items():
        if not isinstance(value, dict):
            bad.append((group, f"not a map: {_short(value)}"))
            continue
        if key == "pg_config":
            kept[group] = value
            continue
        numbers: dict[str, Any] = {}  # only these are read: a copy of them, not of the whole map
        for name in _STATUS_KEYS:
            try:
                numbers[name] = _sequence_number(value.get(name))
            except ValueError:
                bad.append((group, f"its {name} {_short(value.get(name))} is not a sequence number"))
                break
        else:
            kept[group] = numbers
    if not bad:
        return kept, []
    group, why = bad[0]
    more = f" (and {len(bad) - 1:,} other groups)" if len(bad) > 1 else ""
    return kept, [(f"{key} of process group {_short(group)}: {why}{more}: not read",
                   f"{key}[{_short(group)}]: {_short(section[group])}")]


def _entry_problem(entry: Any) -> str | None:
    """Why an entry cannot become a row, or None."""
    if not isinstance(entry, dict):
        return f"an entry that is not a map: {_short(entry)}"
    created = entry.get("time_created_ns")
    if type(created) is not int:
        return "an entry without its time_created_ns"
    if not 0 <= created < _LATEST_NS:
        return f"time_created_ns {_short(created)} is outside 1970–2199 (a damaged or forged entry)"
    for key in ("collective_seq_id", "p2p_seq_id", "timeout_ms"):
        if type(entry.get(key)) is int and entry[key] not in _INT64:
            return f"{key} {_short(entry[key])} does not fit 64 bits"
    if entry.get("retired") is not None and type(entry.get("retired")) is not bool:
        return f"retired is {_short(entry['retired'])}, not true or false"
    if entry.get("frames") is not None and not isinstance(entry["frames"], (list, tuple)):
        return f"frames is not a list of frames: {_short(entry['frames'])}"
    return None


def _sizes(entry: dict[str, Any]) -> tuple[str, str] | str:
    """The entry's input and output sizes as JSON, or why they are not JSON (a pickle can hold bytes,
    sets, tuple keys)."""
    try:
        return json.dumps(entry.get("input_sizes")), json.dumps(entry.get("output_sizes"))
    except (TypeError, ValueError) as error:
        return f"input or output sizes are not JSON: {error}"[:200]


def _dumped_at(path: Path, last: int | None) -> tuple[int | None, list[str]]:
    """When the dump was written: its file's modification time, unless that is before its own last
    entry (`last`: a copy that did not keep the time), then unknown."""
    try:
        written = path.stat().st_mtime_ns
    except OSError:
        return None, []
    if last is not None and written + FILE_CLOCK_SLACK_NS < last:
        return None, ["the dump's file time is before its last entry (a copy that did not keep it): "
                      "when it was written is unknown"]
    return written, []


def _frames(entry: dict[str, Any]) -> str:
    frames = entry.get("frames") or []
    return " ← ".join(f"{f.get('name', '?')} ({f.get('filename', '?')}:{f.get('line', '?')})"
                      for f in frames if isinstance(f, dict))


def parse(path: Path) -> ParseResult:
    """One rank's Flight Recorder dump: a row per entry; a quarantine row per entry that is none, per
    part of the dump that cannot be read (its rank, pg_status, pg_config), or one for the whole dump
    when it is unreadable or past a bound."""
    raw = read_all(path)
    dump = _load(raw)
    if isinstance(dump, str):
        # a pickle is binary: its name says more than its bytes
        excerpt = path.name if raw[:1] == b"\x80" else bytes(raw[:EXCERPT_CHARS]).decode("utf-8", "replace")
        return _refused(path, dump, excerpt)
    rank, unread, notes = _rank(dump, path)
    status, unread_status = _groups(dump, "pg_status")
    configs, unread_configs = _groups(dump, "pg_config")
    unread += unread_status + unread_configs
    job = f"{path.parent.name}/{_RANK_IN_NAME.sub('', path.name)}"
    version = str(dump.get("version", ""))
    ranks_of: dict[tuple[str, str], str] = {}
    rows, bad = [], []
    text = 0  # bytes of text in the rows: each repeats its group's ranks and the dump's version
    for number, entry in enumerate(dump["entries"]):
        problem = _entry_problem(entry)
        sizes = _sizes(entry) if problem is None else problem
        if problem is not None or isinstance(sizes, str):
            bad.append((number, problem or sizes, _short(entry)))
            continue
        inputs, outputs = sizes
        pg = entry.get("process_group") or ("", "")
        pg_name = str(pg[0]) if isinstance(pg, (list, tuple)) and pg else str(entry.get("pg_id", ""))
        pg_desc = str(pg[1]) if isinstance(pg, (list, tuple)) and len(pg) > 1 else ""
        its = status.get(str(entry.get("pg_id")), status.get(pg_name, {}))
        if (pg_name, pg_desc) not in ranks_of:
            config = configs.get(pg_name) or configs.get(pg_desc) or next(iter(configs.values()), {})
            ranks_of[pg_name, pg_desc] = str(config.get("ranks", ""))
        op = str(entry.get("profiling_name", "?"))
        seq = entry.get("p2p_seq_id") if entry.get("is_p2p") else entry.get("collective_seq_id")
        message = (f"rank {rank if rank is not None else '?'} process group {pg_name or '?'}"
                   f"{' (' + pg_desc + ')' if pg_desc else ''}: {'p2p' if entry.get('is_p2p') else 'collective'} "
                   f"{seq} {op} {entry.get('state', '?')}{' (retired)' if entry.get('retired') else ''}, "
                   f"sizes {inputs}" + (f"; from {_frames(entry)}" if entry.get("frames") else ""))
        row = {
            "ts_ns": entry["time_created_ns"], "FR_RANK": rank, "FR_JOB": job, "FR_DUMPED_AT": None,
            "FR_PG": pg_name, "FR_PG_DESC": pg_desc, "FR_PG_RANKS": ranks_of[pg_name, pg_desc],
            "FR_SEQ": seq if type(seq) is int else None, "FR_P2P": bool(entry.get("is_p2p")), "FR_OP": op,
            "FR_STATE": str(entry.get("state", "")), "FR_RETIRED": entry.get("retired"),
            "FR_INPUT_SIZES": inputs, "FR_OUTPUT_SIZES": outputs,
            "FR_TIMEOUT_MS": entry["timeout_ms"] if type(entry.get("timeout_ms")) is int else None,
            "FR_LAST_ENQUEUED": its.get("last_enqueued_collective"), "FR_LAST_STARTED": its.get("last_started_collective"),
            "FR_LAST_COMPLETED": its.get("last_completed_collective"), "FR_VERSION": version,
            "message": message, "source_line": number + 1,
        }
        text += sum(len(v) for v in row.values() if type(v) is str)
        if text > MAX_TEXT_BYTES:
            return _refused(path, f"a Flight Recorder dump past its bounds: its rows would hold more than "
                                  f"{MAX_TEXT_BYTES:,} bytes of text (MAX_TEXT_BYTES; each repeats its process "
                                  "group's ranks and the dump's version)", path.name)
        rows.append(row)
    dumped_at, dumped_notes = _dumped_at(path, max((r["ts_ns"] for r in rows), default=None))
    notes = dumped_notes + notes
    for row in rows:
        row["FR_DUMPED_AT"] = dumped_at
    quarantine = quarantine_rows(str(path), FORMAT, [(n + 1, why, excerpt, None) for n, why, excerpt in bad]
                                 + [(None, why, excerpt, None) for why, excerpt in unread])
    records = len(rows) + len(bad) + len(unread)
    if not rows:
        return ParseResult("events", empty(EVENTS_SCHEMA), quarantine, records,
                           notes=notes + ["a Flight Recorder dump with no entries: nothing was recorded"])
    return ParseResult("events", _events(pl.DataFrame(rows, infer_schema_length=None), path), quarantine, records,
                       notes=notes)


def _events(frame: pl.DataFrame, path: Path) -> pl.DataFrame:
    """The dump's rows as the canonical events frame, its FR_ fields as text (as journald's are)."""
    events = frame.select(
        pl.from_epoch(pl.col("ts_ns"), time_unit="ns").dt.cast_time_unit("us").dt.replace_time_zone("UTC").alias("ts"),
        pl.lit(None, pl.Int64).alias("__REALTIME_TIMESTAMP"), pl.lit(None, pl.Int64).alias("__MONOTONIC_TIMESTAMP"),
        pl.lit(None, pl.String).alias("_BOOT_ID"), pl.lit(None, pl.String).alias("__CURSOR"),
        pl.lit(None, pl.String).alias("host"), pl.lit("flight_recorder").alias("unit"),
        pl.lit("flight_recorder").alias("identifier"), pl.lit(None, pl.Int64).alias("pid"),
        pl.lit(6, pl.Int8).alias("priority"), pl.lit(None, pl.String).alias("message_id"),
        pl.lit(None, pl.String).alias("invocation_id"), "message", pl.lit(DATA_TYPE).alias("data_type"),
        pl.lit(FORMAT).alias("format"), pl.lit(str(path)).alias("source_file"),
        pl.lit(None, pl.Int64).alias("source_offset"), pl.col("source_line").cast(pl.Int64),
        pl.lit(None, EVENTS_SCHEMA["raw_fields"]).alias("raw_fields"),
        # extra fields are text in the events frame, as journald's are; the detector reads the numbers back
        *(pl.col(c).cast(pl.String) for c in frame.columns if c.startswith("FR_")))
    return as_events(events)


register(NAME, sniff, parse, module=__name__)
