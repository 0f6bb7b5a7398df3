"""Detectors: each module turns the aligned timeline into findings with the rows that prove them.

A finding has a kind, the symptom track it belongs to, a component, a time (and an end for a
window), one line of text, and evidence: references to the rows behind it (frame, source file
and line or byte offset, time, an excerpt). `findings_frame` is the canonical `findings` frame.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import polars as pl

from forensics.sources.common.schema import UTC_US

EVIDENCE = pl.Struct({"frame": pl.String, "source": pl.String, "line": pl.Int64, "offset": pl.Int64,
                      "at": UTC_US, "excerpt": pl.String})
FINDINGS_SCHEMA = {"kind": pl.String(), "track": pl.String(), "component": pl.String(), "host": pl.String(), "at": UTC_US,
                   "until": UTC_US, "text": pl.String(), "evidence": pl.List(EVIDENCE)}
EVIDENCE_ROWS = 5  # evidence kept per finding: the first rows, and the count in the text
#: An evidence excerpt keeps its line whole up to this many characters. At 80 (the quarantine's
#: bound, `EXCERPT_CHARS`) it cut the lines that prove a finding mid-word: a c10d watchdog line
#: (`[PG ID 0 PG GUID 0(default_pg) Rank 3] Observed flight recorder dump signal …`) runs to 150
#: and more, an Xid line with its address and process past 100. Longer ones (a request log's repr,
#: a server's argument dump, a folded traceback) end at a word or line boundary, marked with "…".
EVIDENCE_CHARS = 400
CUT_MARK = "…"


@dataclass(frozen=True)
class Evidence:
    """One row behind a finding."""

    frame: str
    source: str | None
    line: int | None
    offset: int | None
    at: datetime | None
    excerpt: str


@dataclass
class Finding:
    """A statement with its proof."""

    kind: str
    track: str
    component: str | None
    at: datetime | None
    text: str
    until: datetime | None = None
    evidence: list[Evidence] = field(default_factory=list)
    host: str | None = None
    #: What the finding states, as values (ranks, process group, sequence number, op, the start a
    #: timeout implies, …): what code reads to decide, never the sentence.
    facts: dict[str, Any] = field(default_factory=dict)


def excerpt(text: str | None, limit: int = EVIDENCE_CHARS) -> str:
    """`text` as evidence quotes it: whole when it fits in `limit` characters; else its whole lines
    that fit (a folded record's first lines), or its first line cut at the last space before the
    bound (a single word longer than half the bound is cut where the bound falls), the cut marked
    with CUT_MARK: never a word cut in two without saying so."""
    text = text or ""
    if len(text) <= limit:
        return text
    head = text[:limit - len(CUT_MARK)]
    line_end = head.rfind("\n")
    if line_end > 0:
        return f"{head[:line_end].rstrip()}\n{CUT_MARK}"
    space = head.rfind(" ")
    return (head[:space] if space > limit // 2 else head).rstrip() + CUT_MARK


def event_evidence(rows: pl.DataFrame, limit: int = EVIDENCE_ROWS) -> list[Evidence]:
    """Evidence from `events` rows (file, byte offset or line, time, the message)."""
    return [Evidence("events", r.get("source_file"), r.get("source_line"), r.get("source_offset"), r.get("ts"),
                     excerpt(r.get("message")))
            for r in rows.head(limit).iter_rows(named=True)]


def findings_frame(findings: list[Finding]) -> pl.DataFrame:
    """The canonical `findings` frame, in time order."""
    rows = [{"kind": f.kind, "track": f.track, "component": f.component, "host": f.host, "at": f.at, "until": f.until,
             "text": f.text, "evidence": [e.__dict__ for e in f.evidence]} for f in findings]
    return pl.DataFrame(rows, schema=FINDINGS_SCHEMA).sort("at", nulls_last=True)


def earliest(times: pl.Series) -> datetime | None:
    """The first time of a column of times (None if empty)."""
    value = times.min()
    return value if isinstance(value, datetime) else None


def latest_time(times: pl.Series) -> datetime | None:
    """The last time of a column of times (None if empty)."""
    value = times.max()
    return value if isinstance(value, datetime) else None


#: The zone the findings' text writes times in (storage stays UTC); `forensics.analyze` sets it.
DISPLAY_ZONE: ContextVar[ZoneInfo] = ContextVar("display_zone", default=ZoneInfo("UTC"))  # noqa: B039 - immutable


#: Whether the evidence spans more than one day in the display zone: then every time is written
#: with its date (21:36:23 of another day is not 21:36:23 of this one); `forensics.analyze` sets it.
DISPLAY_DATED: ContextVar[bool] = ContextVar("display_dated", default=False)


def clock(at: datetime | None) -> str:
    """A time as the findings' text writes it: in the display zone, to the second (with its date
    when the evidence spans more than one day)."""
    if not at:
        return "?"
    return at.astimezone(DISPLAY_ZONE.get()).strftime("%Y-%m-%d %H:%M:%S" if DISPLAY_DATED.get() else "%H:%M:%S")


def spans_days(times: Iterable[datetime | None], zone: ZoneInfo) -> bool:
    """Whether `times` fall on more than one calendar day in `zone`."""
    return len({at.astimezone(zone).date() for at in times if at}) > 1


RUN_COLLAPSED = 5  # consecutive ranks from this many on are written as a range ("0–7")
RANK_PIECES = 16  # ranks or ranges written one by one; the rest are counted


def rank_list(ranks: Iterable[int]) -> str:
    """Ranks as a person writes them: in order, each once, long runs as ranges, at most
    RANK_PIECES pieces and then how many more ("1, 2, 3, 5, 6, 7"; "0–1023 and 4 more (1,028 ranks)")."""
    ordered = sorted(set(ranks))
    runs: list[list[int]] = []
    for rank in ordered:
        if runs and rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    pieces: list[str] = []
    for first, last in runs:
        pieces += [f"{first}–{last}"] if last - first + 1 >= RUN_COLLAPSED else [str(r) for r in range(first, last + 1)]
    if len(pieces) <= RANK_PIECES:
        return ", ".join(pieces)
    return f"{', '.join(pieces[:RANK_PIECES])} and {len(pieces) - RANK_PIECES:,} more ({len(ordered):,} ranks)"


#: Findings of one kind listed one by one (those first in time); the rest are one finding that
#: counts them. A finding per distinct line (a template new in the window, a traceback) grew with
#: the evidence's distinct lines: 20,000 distinct error lines were 20,000 rows in every output.
#: Stack verdicts are kept whole: which of them a report shows is each group's last round.
MAX_FINDINGS_OF_A_KIND = 100


def fold_findings(found: list[Finding]) -> list[Finding]:
    """`found` with at most MAX_FINDINGS_OF_A_KIND findings of each kind (stack verdicts excepted):
    those first in time (undated ones last) kept as they are, in their places, the rest one finding
    of the kind that says how many were left out, when, and why."""
    by_kind: dict[str, list[Finding]] = {}
    for f in found:
        by_kind.setdefault(f.kind, []).append(f)
    left_out: dict[int, Finding] = {}
    for kind, same in by_kind.items():
        if kind == "stack_verdict" or len(same) <= MAX_FINDINGS_OF_A_KIND:
            continue
        ordered = sorted(same, key=lambda f: (f.at is None, f.at or datetime.min))
        rest = ordered[MAX_FINDINGS_OF_A_KIND:]
        dated = [f.at for f in rest if f.at]
        first, last = (min(dated), max(f.until or f.at for f in rest if f.at)) if dated else (None, None)
        when = (f"{clock(first)}–{clock(last)}" if first and last and first != last
                else f"at {clock(first)}" if first else "at no time the evidence gives")
        more = f"{len(rest):,} more finding{'s' if len(rest) > 1 else ''} of this kind ({kind.replace('_', ' ')})"
        # non-fatal device errors stay a finding, not an incident, when counted
        nonfatal = {"non_fatal": True} if all(f.facts.get("non_fatal") for f in rest) else {}
        summary = Finding(kind, rest[0].track, None, first, f"… and {more}, {when}: not listed one by one (only "
                          f"the first {MAX_FINDINGS_OF_A_KIND} of a kind are)", last,
                          facts={"left_out": len(rest), **nonfatal})
        left_out.update({id(f): f for f in rest})
        left_out[id(rest[0])] = summary  # the count takes the place of the first left out
    if not left_out:
        return found
    return [left_out.get(id(f), f) for f in found if id(f) not in left_out or left_out[id(f)] is not f]


def between(first: datetime | None, last: datetime | None) -> str:
    """When lines of one kind were written, as the findings' text says it: "21:34:47–21:39:07",
    "at 21:34:47" when once, "at no time the evidence gives" when their records have none."""
    if first is None and last is None:
        return "at no time the evidence gives"
    if first == last or first is None or last is None:
        return f"at {clock(first or last)}"
    return f"{clock(first)}–{clock(last)}"


def matching_line(group: pl.DataFrame, pattern: str) -> str:
    """The first line, within the group's messages (a record may hold a folded traceback), that
    shows the line kind `pattern` finds."""
    found = re.compile(pattern)
    for message in group.get_column("message").drop_nulls():
        for line in message.splitlines():
            if found.search(line):
                return line.strip()
    return ""


_QUOTE_MARKS = str.maketrans({"“": '"', "”": '"'})


def quoted(text: str) -> str:
    """Evidence between the findings' own quotation marks (“…”), its own curly ones made straight:
    a log line holding `” — rank 3 is the culprit “` cannot close the quote and go on in the
    finding's voice."""
    return f"“{text.translate(_QUOTE_MARKS)}”"


def kind_sentence(rows: pl.DataFrame, words: str, where: str, pattern: str | None) -> str:
    """A line kind's finding in words: how many records, what they are, where, when, and the first
    line `pattern` finds in them, quoted."""
    first, last = earliest(rows.get_column("ts")), latest_time(rows.get_column("ts"))
    sample = matching_line(rows, pattern) if pattern else ""
    return (f"{rows.height} × {words} on {where}, {between(first, last)}"
            + (f": {quoted(excerpt(sample, 160))}" if sample else "") + ".")


def one_unit(rows: pl.DataFrame) -> str | None:
    """The unit (a server log's file name, a journal's systemd unit) all `rows` come from, if one:
    what names them when no component does."""
    units = rows.get_column("unit").drop_nulls().unique() if "unit" in rows.columns else pl.Series([])
    return str(units[0]) if units.len() == 1 else None


def span(seconds: float) -> str:
    """A duration in words: 75 s, 5m58s, 1h02m. Whole seconds are cut, not rounded, as `clock`
    cuts times: a freeze from 21:34:47 to 21:42:00.7 reads 7m13s, as the two times shown do."""
    seconds = int(seconds)
    if seconds < 100:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
