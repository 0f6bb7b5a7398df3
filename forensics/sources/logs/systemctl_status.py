"""`systemctl status UNIT…` as people paste it: each unit's state, and the journal lines it shows.

`systemctl status` prints, per unit, a head (`● vllm.service - Description`, `○` when inactive,
`×` when failed), its `Loaded:` and `Active:` lines (`active (running) since Sun 2026-02-22
06:35:31 AEST; 25min ago`, `inactive (dead)`, `failed (Result: exit-code) since …`), `Main PID:`,
`Memory:`, the cgroup's processes, then the last journal lines of the unit in journalctl's short
form (`Feb 22 06:55:53 host systemd[1643]: openclaw-vllm.service: Scheduled restart job, restart
counter is at 76.`). Pastes often put `date` and `systemctl is-enabled` answers (`enabled`) around it.

Each unit is one `events` row saying its state (its time: when it entered that state), and each
journal line one row of its own. The journal lines carry no zone: they are in the host's local
time, which the `Active:` line of the same paste names (`AEST`); they are placed with that zone's
offset when it is one of the unambiguous abbreviations below, else read as UTC and the input's notes
say so. Other lines (the `date` line, `is-enabled` answers, blank lines) are context; a line
outside every block is quarantined with its line.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl

from forensics.sources.common.rawio import read_all
from forensics.sources.common.schema import EVENTS_SCHEMA, ParseResult, as_events, empty, quarantine_rows
from forensics.sources import register
from forensics.sources.kubernetes.kubectl import DATE_LINE

NAME = "systemctl_status"
FORMAT = "systemctl_status"
DATA_TYPE = "systemd:status"
_UNIT = r"[\w@.:\\-]+\.(?:service|scope|socket|timer|mount|slice|target|path)"
_HEAD = re.compile(rf"^(?P<bullet>[●○×*]) (?P<unit>{_UNIT})(?: - (?P<description>.*))?$")
_FIELD = re.compile(r"^\s+(?P<key>Loaded|Active|Main PID|Tasks|Memory|CPU|CGroup|Process|Docs|TriggeredBy|Status|"
                    r"Invocation|IO|Drop-In):\s*(?P<value>.*)$")
_TREE = re.compile(r"^\s+(?:[├└│]─?|\s)")
_SINCE = re.compile(r"since \w{3} (?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2}) (?P<time>[0-9]{2}:[0-9]{2}:[0-9]{2})"
                    r"(?: (?P<zone>[A-Z]{2,5}|[+-][0-9]{2}:?[0-9]{2}))?")
_JOURNAL = re.compile(r"^(?P<month>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(?P<day>[0-9]{1,2}) "
                      r"(?P<time>[0-9]{2}:[0-9]{2}:[0-9]{2}) (?P<host>\S+) (?P<ident>[^\s\[:]+)(?:\[(?P<pid>[0-9]+)\])?: "
                      r"(?P<message>.*)$")
_CONTEXT = re.compile(r"^(?:enabled|disabled|static|masked|indirect|generated|transient|linked|alias|active|inactive|"
                      r"failed|activating|deactivating)$")
_SNIFF = re.compile(rb"(?m)^(?:\xe2\x97\x8f|\xe2\x97\x8b|\xc3\x97|\*) [\w@.:\\-]+\.(?:service|scope|socket|timer|mount) "
                    rb"- .*\n\s+Loaded: ")
#: Zone abbreviations systemd prints that name one offset only (CST, IST, … name several: not taken).
ZONES = {"UTC": 0, "GMT": 0, "CET": 60, "CEST": 120, "EET": 120, "EEST": 180, "WET": 0, "WEST": 60, "BST": 60,
         "EST": -300, "EDT": -240, "CDT": -300, "MST": -420, "MDT": -360, "PST": -480, "PDT": -420, "JST": 540,
         "KST": 540, "HKT": 480, "SGT": 480, "AWST": 480, "ACST": 570, "ACDT": 630, "AEST": 600, "AEDT": 660,
         "NZST": 720, "NZDT": 780, "MSK": 180}
_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
                                       "Dec"), start=1)}


def sniff(head: bytes, path: Path) -> bool:
    """A unit's head (`● x.service - …`) followed by its `Loaded:` line within the first 4 KiB."""
    return not path.is_dir() and bool(_SNIFF.search(head))


def _offset(zone: str | None) -> timedelta | None:
    if zone is None:
        return None
    if zone in ZONES:
        return timedelta(minutes=ZONES[zone])
    if (m := re.fullmatch(r"([+-])([0-9]{2}):?([0-9]{2})", zone)):
        minutes = int(m[2]) * 60 + int(m[3])
        return timedelta(minutes=minutes if m[1] == "+" else -minutes)
    return None


def parse(path: Path) -> ParseResult:
    """A row per unit (its state) and per journal line shown; other lines quarantined."""
    lines = bytes(read_all(path)).decode("utf-8", "replace").splitlines()
    rows: list[dict[str, object]] = []
    bad: list[tuple[int, str, str]] = []
    unit: dict[str, object] | None = None
    zones: list[timedelta] = []
    year: int | None = None
    stated_year: int | None = None
    for number, raw in enumerate(lines, 1):
        line = raw.rstrip("\r")
        if DATE_LINE.match(line.strip()):
            stated_year = stated_year or int(line.strip()[-4:])  # `date` before the output: the capture's year
            continue
        if not line.strip() or _CONTEXT.match(line.strip()):
            continue
        if (m := _HEAD.match(line)):
            unit = {"unit": m["unit"], "description": m["description"], "line": number, "fields": {}}
            rows.append(unit)
            continue
        if unit is not None and (m := _FIELD.match(line)):
            unit["fields"][m["key"]] = m["value"]  # type: ignore[index]
            if m["key"] == "Active" and (since := _SINCE.search(m["value"])):
                offset = _offset(since["zone"])
                try:
                    local = datetime.strptime(f"{since['date']} {since['time']}", "%Y-%m-%d %H:%M:%S")
                except ValueError:  # a date no calendar has: the state is kept, at no time
                    continue
                year = local.year
                if offset is not None:
                    zones.append(offset)
                    unit["ts"] = _utc(local, offset)
            continue
        if unit is not None and _TREE.match(line) and not _JOURNAL.match(line.strip()):
            continue  # the cgroup's process tree
        if (m := _JOURNAL.match(line)) and _valid_day(m["month"], m["day"], m["time"]):
            rows.append({"journal": m.groupdict(), "line": number, "unit_of_block": unit["unit"] if unit else None})
            continue
        bad.append((number, "a line outside systemctl status's unit blocks and journal lines", line))
    quarantine = quarantine_rows(str(path), FORMAT, [(n, why, text, None) for n, why, text in bad])
    if not rows:
        return ParseResult("events", empty(EVENTS_SCHEMA), quarantine, len(bad))
    offset = zones[0] if zones and all(z == zones[0] for z in zones) else None
    notes = ([f"its journal lines are read in the zone its Active: lines name (UTC{_hours(offset)})"] if offset is not None
             else ["its journal lines carry no zone and no Active: line names one: read as UTC"])
    year = year or stated_year
    if year is None:  # journalctl's short lines carry no year: the file's own time is the last resort
        year = datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).year
        notes.append(f"its journal lines carry no year and the paste states none: {year}, the file's modification "
                     "time's, is assumed")
    events = [_row(r, offset, year) for r in rows]
    frame = pl.DataFrame(events, infer_schema_length=None)
    out = frame.select(
        pl.col("ts").cast(EVENTS_SCHEMA["ts"]),
        pl.lit(None, pl.Int64).alias("__REALTIME_TIMESTAMP"), pl.lit(None, pl.Int64).alias("__MONOTONIC_TIMESTAMP"),
        pl.lit(None, pl.String).alias("_BOOT_ID"), pl.lit(None, pl.String).alias("__CURSOR"),
        pl.col("host").cast(pl.String), pl.col("unit").cast(pl.String), pl.col("identifier").cast(pl.String),
        pl.col("pid").cast(pl.Int64), pl.col("priority").cast(pl.Int8), pl.lit(None, pl.String).alias("message_id"),
        pl.lit(None, pl.String).alias("invocation_id"), pl.col("message").cast(pl.String),
        pl.lit(DATA_TYPE).alias("data_type"), pl.lit(FORMAT).alias("format"), pl.lit(str(path)).alias("source_file"),
        pl.lit(None, pl.Int64).alias("source_offset"), pl.col("source_line").cast(pl.Int64),
        pl.lit(None, EVENTS_SCHEMA["raw_fields"]).alias("raw_fields"), pl.col("UNIT_ACTIVE").cast(pl.String))
    return ParseResult("events", as_events(out), quarantine, len(rows) + len(bad), notes=notes)


def _valid_day(month: str, day: str, time: str) -> bool:
    """Whether a journal line's month, day and time exist in a leap year (its year is read later)."""
    try:
        datetime(2024, _MONTHS[month], int(day), *(int(x) for x in time.split(":")))
    except ValueError:
        return False
    return True


def _hours(offset: timedelta) -> str:
    minutes = int(offset.total_seconds() // 60)
    return f"{'+' if minutes >= 0 else '-'}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def _utc(local: datetime, offset: timedelta | None) -> datetime | None:
    """A local time at `offset` as UTC; None where that falls outside years 1-9999 (a forged date)."""
    try:
        return (local - (offset or timedelta(0))).replace(tzinfo=timezone.utc)
    except OverflowError:
        return None


def _pid(text: str | None) -> int | None:
    """A process id as written; None for none, or for more digits than Linux's largest (4,194,304) has."""
    return int(text) if text and len(text) <= 7 else None


def _row(r: dict[str, object], offset: timedelta | None, year: int) -> dict[str, object]:
    """A unit's state, or a journal line shown under it, as an events row."""
    if "journal" in r:
        j = r["journal"]
        assert isinstance(j, dict)
        try:
            local = datetime(year, _MONTHS[j["month"]], int(j["day"]), *(int(x) for x in j["time"].split(":")))
        except ValueError:  # the 29th of February of a year that has none
            local = datetime(year, _MONTHS[j["month"]], 28, *(int(x) for x in j["time"].split(":")))
        ts = _utc(local, offset)
        message = f"{j['month']} {j['day']} {j['time']} {j['host']} {j['ident']}{'[' + j['pid'] + ']' if j['pid'] else ''}: " \
                  f"{j['message']}"
        failed = bool(re.search(r"status=[1-9]|Failed with result|\bError\b|Traceback|\w+Error:", j["message"]))
        return {"ts": ts, "host": j["host"], "unit": r.get("unit_of_block") or j["ident"], "identifier": j["ident"],
                "pid": _pid(j["pid"]), "priority": 3 if failed else 6, "message": message,
                "source_line": r["line"], "UNIT_ACTIVE": None}
    fields = r["fields"]
    assert isinstance(fields, dict)
    active = fields.get("Active", "")
    said = "; ".join(f"{k} {v}" for k, v in fields.items() if k in ("Active", "Loaded", "Main PID", "Memory"))
    main_pid = re.match(r"([0-9]+)", fields.get("Main PID", ""))
    return {"ts": r.get("ts"), "host": None, "unit": r["unit"], "identifier": "systemctl",
            "pid": _pid(main_pid[1]) if main_pid else None,
            "priority": 3 if active.startswith("failed") else 6,
            "message": f"systemctl status {r['unit']}: {said}", "source_line": r["line"],
            "UNIT_ACTIVE": active.split(" since ")[0]}


register(NAME, sniff, parse, module=__name__)
