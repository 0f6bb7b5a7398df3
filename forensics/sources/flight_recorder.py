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
"""

from __future__ import annotations

import io
import json
import pickle
import re
from pathlib import Path
from typing import Any

import polars as pl

from forensics.formats.rawio import read_all
from forensics.formats.schema import EVENTS_SCHEMA, QUARANTINE_SCHEMA, ParseResult, as_events, empty, excerpt_text, quarantine_rows
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


class _PlainData(pickle.Unpickler):
    """Builds only what pickle makes without naming a class; any class or function is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused to load {module}.{name}: a Flight Recorder dump holds plain data only")


def sniff(head: bytes, path: Path) -> bool:
    """A pickle (protocol 2+) or a JSON object naming Flight Recorder's keys in its first 4 KiB."""
    if path.is_dir() or not head:
        return False
    if head[:1] == b"\x80":
        return any(key in head for key in _KEYS)
    return head.lstrip()[:1] == b"{" and b'"entries"' in head and any(b'"' + k + b'"' in head for k in _KEYS)


def _load(data: bytes) -> dict[str, Any] | str:
    """The dump as plain data, or why it cannot be read."""
    try:
        if data[:1] == b"\x80":
            dump = _PlainData(io.BytesIO(data)).load()
        else:
            dump = json.loads(data.decode("utf-8", "replace"))
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError,
            RecursionError, MemoryError) as error:
        return f"not a readable Flight Recorder dump: {type(error).__name__}: {error}"[:300]
    if not isinstance(dump, dict) or not isinstance(dump.get("entries"), list):
        return "not a Flight Recorder dump: no list of entries"
    return dump


def _rank(dump: dict[str, Any], path: Path) -> int | None:
    if isinstance(dump.get("rank"), int):
        return int(dump["rank"])
    found = _RANK_IN_NAME.search(path.name)
    return int(found[1]) if found else None


def _dumped_at(path: Path, entries: list[Any]) -> tuple[int | None, list[str]]:
    """When the dump was written: its file's modification time, unless that is before its own last
    entry (a copy that did not keep the time), then unknown."""
    try:
        written = path.stat().st_mtime_ns
    except OSError:
        return None, []
    last = max((e["time_created_ns"] for e in entries if isinstance(e, dict)
                and isinstance(e.get("time_created_ns"), int)), default=None)
    if last is not None and written + FILE_CLOCK_SLACK_NS < last:
        return None, ["the dump's file time is before its last entry (a copy that did not keep it): "
                      "when it was written is unknown"]
    return written, []


def _frames(entry: dict[str, Any]) -> str:
    frames = entry.get("frames") or []
    return " ← ".join(f"{f.get('name', '?')} ({f.get('filename', '?')}:{f.get('line', '?')})"
                      for f in frames if isinstance(f, dict))


def parse(path: Path) -> ParseResult:
    """One rank's Flight Recorder dump: a row per entry."""
    dump = _load(bytes(read_all(path)))
    if isinstance(dump, str):
        quarantine = pl.DataFrame({"source_file": [str(path)], "format": [FORMAT], "offset": [0], "line": [None],
                                   "reason": [dump], "excerpt": [excerpt_text(path.name)], "subject": [None]}
                                  ).cast(dict(QUARANTINE_SCHEMA))  # type: ignore[arg-type]
        return ParseResult("events", empty(EVENTS_SCHEMA), quarantine, 1)
    rank = _rank(dump, path)
    dumped_at, notes = _dumped_at(path, dump["entries"])
    job = f"{path.parent.name}/{_RANK_IN_NAME.sub('', path.name)}"
    status = dump.get("pg_status") if isinstance(dump.get("pg_status"), dict) else {}
    configs = dump.get("pg_config") if isinstance(dump.get("pg_config"), dict) else {}
    rows, bad = [], []
    for number, entry in enumerate(dump["entries"]):
        if not isinstance(entry, dict) or not isinstance(entry.get("time_created_ns"), int):
            bad.append((number, "an entry without its time_created_ns", str(entry)))
            continue
        pg = entry.get("process_group") or ("", "")
        pg_name = str(pg[0]) if isinstance(pg, (list, tuple)) and pg else str(entry.get("pg_id", ""))
        pg_desc = str(pg[1]) if isinstance(pg, (list, tuple)) and len(pg) > 1 else ""
        its = status.get(str(entry.get("pg_id")), status.get(pg_name, {})) or {}
        config = configs.get(pg_name) or configs.get(pg_desc) or next(iter(configs.values()), {}) or {}
        op = str(entry.get("profiling_name", "?"))
        seq = entry.get("p2p_seq_id") if entry.get("is_p2p") else entry.get("collective_seq_id")
        rows.append({
            "ts_ns": entry["time_created_ns"], "FR_RANK": rank, "FR_JOB": job, "FR_DUMPED_AT": dumped_at,
            "FR_PG": pg_name, "FR_PG_DESC": pg_desc,
            "FR_PG_RANKS": str(config.get("ranks", "")) if isinstance(config, dict) else "",
            "FR_SEQ": seq if isinstance(seq, int) else None, "FR_P2P": bool(entry.get("is_p2p")), "FR_OP": op,
            "FR_STATE": str(entry.get("state", "")), "FR_RETIRED": entry.get("retired"),
            "FR_INPUT_SIZES": json.dumps(entry.get("input_sizes")), "FR_OUTPUT_SIZES": json.dumps(entry.get("output_sizes")),
            "FR_TIMEOUT_MS": entry.get("timeout_ms") if isinstance(entry.get("timeout_ms"), int) else None,
            "FR_LAST_ENQUEUED": its.get("last_enqueued_collective"), "FR_LAST_STARTED": its.get("last_started_collective"),
            "FR_LAST_COMPLETED": its.get("last_completed_collective"), "FR_VERSION": str(dump.get("version", "")),
            "message": (f"rank {rank if rank is not None else '?'} process group {pg_name or '?'}"
                        f"{' (' + pg_desc + ')' if pg_desc else ''}: {'p2p' if entry.get('is_p2p') else 'collective'} "
                        f"{seq} {op} {entry.get('state', '?')}{' (retired)' if entry.get('retired') else ''}, "
                        f"sizes {json.dumps(entry.get('input_sizes'))}"
                        + (f"; from {_frames(entry)}" if entry.get("frames") else "")),
            "source_line": number + 1,
        })
    quarantine = quarantine_rows(str(path), FORMAT, [(n + 1, why, text, None) for n, why, text in bad])
    if rank is None:
        notes.append("the dump's rank is neither in it nor at the end of its file name")
    if not rows:
        return ParseResult("events", empty(EVENTS_SCHEMA), quarantine, len(bad),
                           notes=notes + ["a Flight Recorder dump with no entries: nothing was recorded"])
    frame = pl.DataFrame(rows, infer_schema_length=None)
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
    events = as_events(events)
    return ParseResult("events", events, quarantine, len(rows) + len(bad), notes=notes)


register(NAME, sniff, parse, module=__name__)
