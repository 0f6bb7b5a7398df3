"""`torchfrtrace`'s own text: what torch's Flight Recorder analyser printed, pasted into a ticket.

`torchfrtrace -p nccl_trace_rank_ DIR` (torch.distributed.flight_recorder) matches the ranks'
dumps and logs one block per collective it finds wrong (`components/utils.py`, `types.py`)::

    Not all ranks joining collective, sequence number: 4     (torch ≤ 2.6: `… collective 5 at entry 4`)
    internal record id: 3
    group info: 0:default_pg
    collective: nccl:all_reduce
    missing ranks: {1}
    input sizes: [[4]]
    …
    expected ranks: {0, 1, 2, 3}
    collective state: scheduled
    error msg: Culprit rank 2; Error type: COLLECTIVE_TYPE_MISMATCH, Expected collective type: …
    collective stack trace:
     all_reduce at …/distributed_c10d.py:3245

Older torch (`tools/flight_recorder/components/builder.py`) wrote `… collective N at entry M`,
`Collective N at entry M errors`, `error message:` and `expected ranks:` as a count. The other heads
are `Collective sequence number: N has errors`, `Input/output mismatch in the collective sequence
number: N`, and the lines saying it could not decide (`We cannot decide what's
wrong with this collective entry because we missed FR dumps from ranks ({3})`) or found nothing
(`No errors found for this collective entry`). Each block is one `events` row (`data_type`
`torch:frtrace_text`) with its fields in `FR_*` columns, as the dumps' rows carry them. The text
holds **no time at all**: `ts` is null, the rows are read but place nothing on the time axis, and
the verdict says so. Lines outside the blocks (a shell prompt, the "tabulate is not installed"
notice) are quarantined with their line, never dropped.
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from forensics.sources.common.rawio import read_all
from forensics.sources.common.schema import EVENTS_SCHEMA, ParseResult, as_events, empty, quarantine_rows
from forensics.sources import register

NAME = "flight_recorder_text"
FORMAT = "torchfrtrace_text"
DATA_TYPE = "torch:frtrace_text"
_HEADS = (
    ("missing", re.compile(r"Not all ranks joining collective(?:, sequence number:)? (?P<seq>-?\d+)"
                           r"(?: at entry (?P<entry>\d+))?")),
    ("errors", re.compile(r"Collective (?:sequence number: )?(?P<seq>-?\d+)(?: at entry (?P<entry>\d+))? "
                          r"(?:has )?errors")),
    ("size_mismatch", re.compile(r"Input/output mismatch in the collective (?:sequence number: )?(?P<seq>-?\d+)"
                                 r"(?: at entry (?P<entry>\d+))?")),
    ("undecided", re.compile(r"We cannot decide what's wrong with this collective entry because we missed FR dumps "
                             r"from ranks \((?P<missing>[^)]*)\)")),
    ("no_errors", re.compile(r"No errors found for this collective entry")),
)
_FIELD = re.compile(r"^(?P<key>internal record id|group info|collective|missing ranks|input sizes|output sizes|"
                    r"world size|expected ranks|collective state|error msg|error message|total input numel|total output numel):"
                    r" ?(?P<value>.*)$")
_INT64_LOW, _INT64_HIGH = -(2**63), 2**63 - 1
_STACK = "collective stack trace:"
_FRAME = re.compile(r"^\s*\S+ at \S+")  # `all_reduce at …/distributed_c10d.py:3245`
_NOTICE = re.compile(r"^(tabulate is not installed\. Proceeding without it\.)$")
_COLUMNS = {"missing ranks": "FR_MISSING", "expected ranks": "FR_EXPECTED", "collective": "FR_OP",
            "collective state": "FR_STATE", "input sizes": "FR_INPUT_SIZES", "output sizes": "FR_OUTPUT_SIZES",
            "error msg": "FR_ERRORS", "error message": "FR_ERRORS", "world size": "FR_WORLD_SIZE"}


def _sequence_number(text: str) -> int | None:
    """The number `-?digits` stands for, or None when it does not fit 64 bits: torch's sequence
    numbers do, a longer one is damaged or forged (and one of 4,300 digits cannot even be read as an
    int by Python)."""
    digits = text.lstrip("-").lstrip("0") or "0"
    if len(digits) > 19:
        return None
    value = -int(digits) if text.startswith("-") else int(digits)
    return value if _INT64_LOW <= value <= _INT64_HIGH else None


def _head(line: str) -> tuple[str, re.Match[str]] | None:
    for kind, pattern in _HEADS:
        found = pattern.search(line)
        if found:
            return kind, found
    return None


def sniff(head: bytes, path: Path) -> bool:
    """A text whose first 4 KiB hold one of torchfrtrace's block heads and its `group info:` line."""
    if path.is_dir() or not head or head[:1] in (b"\x80", b"{"):
        return False
    text = head.decode("utf-8", "replace")
    return "group info: " in text and any(p.search(text) for _, p in _HEADS[:3])


def parse(path: Path) -> ParseResult:
    """One row per block torchfrtrace printed; every other non-blank line quarantined with its line."""
    lines = bytes(read_all(path)).decode("utf-8", "replace").splitlines()
    blocks: list[dict[str, object]] = []
    bad: list[tuple[int, str, str]] = []
    current: dict[str, object] | None = None
    in_stack = False
    for number, raw in enumerate(lines, 1):
        line = raw.rstrip()
        started = _head(line)
        if started:
            kind, found = started
            groups = found.groupdict()
            in_stack = False
            seq = groups.get("seq")
            if seq and _sequence_number(seq) is None:
                # the block's head is quarantined, and the lines under it with it (outside any finding)
                bad.append((number, f"sequence number {seq[:40]}{'...' if len(seq) > 40 else ''} does not fit "
                                    "64 bits: not a finding torchfrtrace printed", line))
                current = None
                continue
            current = {"kind": kind, "line": number, "text": [line], "FR_SEQ": _sequence_number(seq) if seq else None,
                       "FR_MISSING_DUMPS": groups.get("missing")}
            blocks.append(current)
            continue
        field = _FIELD.match(line.strip())
        if current is not None and field:
            current["text"].append(line)  # type: ignore[attr-defined]
            key, value = field["key"], field["value"].strip()
            if key == "group info":
                name, _, desc = value.partition(":")
                current["FR_PG"], current["FR_PG_DESC"] = name, desc
            elif key in _COLUMNS:
                current[_COLUMNS[key]] = value
            in_stack = False
            continue
        if current is not None and line.strip() == _STACK:
            current["text"].append(line)  # type: ignore[attr-defined]
            in_stack = True
            continue
        # the first frame follows the heading after a space; older torch printed the frames' list there
        if current is not None and in_stack and (_FRAME.match(line) or line[:1] in (" ", "\t")):
            current["text"].append(line)  # type: ignore[attr-defined]
            continue
        if line.strip():
            reason = ("torchfrtrace's notice, not a finding" if _NOTICE.match(line.strip())
                      else "a line outside torchfrtrace's findings")
            bad.append((number, reason, line))
    quarantine = quarantine_rows(str(path), FORMAT, [(n, why, text, None) for n, why, text in bad])
    notes = ["torchfrtrace's text holds no time: its findings are read but placed at no time"] if blocks else []
    if not blocks:
        return ParseResult("events", empty(EVENTS_SCHEMA), quarantine, len(bad), notes=notes)
    rows = [{"FR_FINDING": b["kind"], "FR_SEQ": b.get("FR_SEQ"), "FR_PG": b.get("FR_PG"),
             "FR_PG_DESC": b.get("FR_PG_DESC"), **{c: b.get(c) for c in (*_COLUMNS.values(), "FR_MISSING_DUMPS")},
             "message": "\n".join(b["text"]), "source_line": b["line"]} for b in blocks]  # type: ignore[arg-type]
    frame = pl.DataFrame(rows, infer_schema_length=None)
    events = frame.select(
        pl.lit(None, EVENTS_SCHEMA["ts"]).alias("ts"),
        pl.lit(None, pl.Int64).alias("__REALTIME_TIMESTAMP"), pl.lit(None, pl.Int64).alias("__MONOTONIC_TIMESTAMP"),
        pl.lit(None, pl.String).alias("_BOOT_ID"), pl.lit(None, pl.String).alias("__CURSOR"),
        pl.lit(None, pl.String).alias("host"), pl.lit("torchfrtrace").alias("unit"),
        pl.lit("torchfrtrace").alias("identifier"), pl.lit(None, pl.Int64).alias("pid"),
        # a block is torchfrtrace naming a collective gone wrong (a warning: the verdict it gives is the
        # finding, not an error line of its own); "no errors" is information
        pl.when(pl.col("FR_FINDING") == "no_errors").then(6).otherwise(4).cast(pl.Int8).alias("priority"),
        pl.lit(None, pl.String).alias("message_id"), pl.lit(None, pl.String).alias("invocation_id"),
        "message", pl.lit(DATA_TYPE).alias("data_type"), pl.lit(FORMAT).alias("format"),
        pl.lit(str(path)).alias("source_file"), pl.lit(None, pl.Int64).alias("source_offset"),
        pl.col("source_line").cast(pl.Int64), pl.lit(None, EVENTS_SCHEMA["raw_fields"]).alias("raw_fields"),
        *(pl.col(c).cast(pl.String) for c in frame.columns if c.startswith("FR_")))
    return ParseResult("events", as_events(events), quarantine, len(blocks) + len(bad), notes=notes)


register(NAME, sniff, parse, module=__name__)
