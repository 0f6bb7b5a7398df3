"""What `kubectl` prints about a cluster's objects, as an SRE pastes it: event tables, `describe`
and `get pods`.

- Event tables: `kubectl get events` (`LAST SEEN TYPE REASON OBJECT MESSAGE`, with `NAMESPACE`
  first under `-A`; `-o wide` adds `SUBOBJECT SOURCE … FIRST SEEN COUNT NAME`; before 1.14
  `LASTSEEN FIRSTSEEN COUNT NAME KIND SUBOBJECT TYPE REASON SOURCE MESSAGE`), the newer
  `kubectl events` (`44m (x9 over 60m)` in LAST SEEN), and the `Events:` section of any
  `kubectl describe` (`Type Reason Age From Message`). Columns are cut where the header's titles
  start (kubectl's tab writer aligns every row to them); rows pasted without their header
  (grep-filtered) are read by their shape. A line that does not start a row continues the
  message above it (a wrapped paste), and a header-less row cut before its message takes the
  next line as its message.
- `kubectl describe pod`: each container's State / Last State (Reason, Exit Code, Started,
  Finished), Ready, Restart Count and memory limit, one row per container (the blocks are read by
  `describe_blocks`; this module reads the tables, and a block's `Events:` table with them).
  A describe's part pasted without its `Name:` line (a container's `State:`, a node's `Allocated
  resources:`) is that object's, named by a `kubectl describe pod -n ns name` line in the paste.
- `kubectl get pods`: NAME, READY, STATUS, RESTARTS (`4 (57s ago)`), AGE; rows grep kept without
  their header too.

Each row is one `events` record with its object and numbers in `K8S_*` columns and a message that
says it in one line (`Warning FailedScheduling pod/default/x (x2 over 6m58s): 0/12 nodes …`).
Times: kubectl prints ages ("3m41s"), not times. An age becomes a time only against a "now" the
capture itself gives (`capture_now`: the file's capture header as `collect` writes it, a `date`
line as careful people write before the output, the bundle's collect manifest); the row then
carries its first and last sightings as times (`K8S_FIRST_AT`, `K8S_LAST_AT`) and where the "now"
came from (`K8S_AGES_FROM`). With none, rows stay at no time and the input's notes say so.
`describe`'s Started / Finished are full times and are used as they are. Lines outside every
table and block (prompts, commands, prose) are quarantined with their line, never dropped.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from forensics.sources.common.rawio import read_all
from forensics.sources.common.schema import EVENTS_SCHEMA, ParseResult, as_events, empty, quarantine_rows
from forensics.sources.common.snapshot_time import parse_header, parse_time
from forensics.sources import register
from forensics.sources.kubernetes.describe_blocks import DescribeBlocks, named

NAME = "kubectl"
FORMAT = "kubectl"
DATA_TYPE = "kubectl:object"
_AGE = r"(?:<unknown>|<invalid>|[0-9]+[smhdy](?:[0-9]+[smhdy])*)"
_OBJECT = r"[A-Za-z]+/(?:[\w.:-]|<[^<>\n]{1,40}>)+"  # `<id here>`: a name an author redacted
# an events row without its header: [namespace] age [(xN over age)] Normal|Warning Reason kind/name message
_ROW = re.compile(rf"^\s*(?:(?P<namespace>[a-z0-9][a-z0-9-]*)\s+)?(?P<last>{_AGE})(?: \(x(?P<count>[0-9]+) over "
                  rf"(?P<over>{_AGE})\))?\s+(?P<type>Normal|Warning)\s+(?P<reason>[A-Za-z]+)\s+(?P<object>{_OBJECT})"
                  r"(?:\s+(?P<message>\S.*)|\s*)$")
_DESCRIBE_ROW = re.compile(rf"^\s*(?P<type>Normal|Warning)\s+(?P<reason>[A-Za-z]+)\s+(?P<last>{_AGE}|<unknown>)"
                           rf"(?: \(x(?P<count>[0-9]+) over (?P<over>{_AGE})\))?\s+(?P<source>\S(?:.*?\S)?)\s{{2,}}"
                           r"(?P<message>\S.*)$")
# `get events -o wide` rows without their header: after the object, SUBOBJECT and SOURCE before the
# message, FIRST SEEN, COUNT and the event's NAME (`<object>.<hex>`) after it, each 2+ spaces apart
_WIDE_TAIL = re.compile(rf"^(?:(?P<subobject>spec\.[\w.]+\{{[^}}]*\}})\s{{2,}})?(?P<source>[a-z][\w-]*(?:, [\w.-]+)?)"
                        rf"\s{{2,}}(?P<message>\S.*?)\s{{2,}}(?P<first>{_AGE})\s+(?P<count>[0-9]+)\s+[\w.-]+\.[0-9a-f]{{8,}}$")
_EVENTS_HEADER = re.compile(r"^\s*(?:NAMESPACE\s+)?LAST SEEN\s+TYPE\s+REASON\s+OBJECT\s+")
_LEGACY_HEADER = re.compile(r"^\s*LASTSEEN\s+FIRSTSEEN\s+COUNT\s+NAME\s+KIND\s+")
_DESCRIBE_EVENTS = re.compile(r"^\s*Type\s+Reason\s+Age\s+From\s+Message\s*$")
# `kubectl describe` before 1.14: tab-separated, `FirstSeen LastSeen Count From SubobjectPath Type Reason Message`
_LEGACY_DESCRIBE_EVENTS = re.compile(r"^\s*FirstSeen\s+LastSeen\s+Count\s+From\s+(?:SubobjectPath\s+)?Type\s+Reason"
                                     r"\s+Message\s*$")
_ANY_HEADER = re.compile(r"^\s*(?:(?:NAMESPACE\s+)?(?:LAST SEEN|NAME)\s|LASTSEEN\s|Type\s+Reason\s|FirstSeen\s|Events:)")
_PODS_HEADER = re.compile(r"^\s*(?:NAMESPACE\s+)?NAME\s+READY\s+STATUS\s+RESTARTS\s+AGE\b")
_POD_ROW = re.compile(r"^\s*(?:(?P<namespace>[a-z0-9][a-z0-9-]*)\s+)?(?P<name>[a-z0-9][\w.-]*)\s+(?P<ready>[0-9]+/[0-9]+)"
                      r"\s+(?P<status>[A-Za-z]\S*)\s+(?P<restarts>[0-9]+(?: \((?P<ago>" + _AGE + r") ago\))?)\s+(?P<age>"
                      + _AGE + r")\b")
#: A `date` line before pasted output (`Sat Feb 21 21:00:31 UTC 2026`): the capture's own time.
DATE_LINE = re.compile(r"^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?P<month>[A-Z][a-z]{2}) +(?P<day>[0-9]{1,2}) "
                        r"(?P<time>[0-9]{2}:[0-9]{2}:[0-9]{2}) (?:(?P<zone>[A-Z]{2,5}) )?(?P<year>[0-9]{4})$")
_RFC1123 = "%a, %d %b %Y %H:%M:%S %z"
_SNIFF = re.compile(rb"(?m)^\s*(?:(?:NAMESPACE\s+)?LAST SEEN\s+TYPE\s+REASON\s+OBJECT|LASTSEEN\s+FIRSTSEEN\s+COUNT|"
                    rb"Type\s+Reason\s+Age\s+From\s+Message|FirstSeen\s+LastSeen\s+Count\s+From|(?:NAMESPACE\s+)?NAME\s+READY\s+STATUS\s+RESTARTS\s+AGE|"
                    rb"Events:\s*$|(?:[a-z0-9][a-z0-9-]*[ \t]+)?(?:<unknown>|<invalid>|[0-9]+[smhdy](?:[0-9]+[smhdy])*)(?: \(x[0-9]+ over [0-9smhdy]+\))?[ \t]+"
                    rb"(?:Normal|Warning)[ \t]+[A-Z][A-Za-z]+[ \t]+[A-Za-z]+/\S|(?:Normal|Warning)[ \t]+[A-Z][A-Za-z]+[ \t]+(?:<unknown>|[0-9]+[smhd])|Name:[ \t]+\S+[^\n]*\n(?:[^\n]*\n){0,3}?[ \t]*(?:Namespace|Roles|Labels):|"
                    rb"(?:Last )?State:[ \t]+(?:Terminated|Running|Waiting)[ \t]*\r?\n(?:[^\n]*\n){0,2}?[ \t]*(?:Reason|Exit Code|Started):|"
                    rb"Allocated resources:[ \t]*\r?\n|"
                    rb"(?:[a-z0-9][a-z0-9-]*[ \t]+)?[a-z0-9][\w.-]*[ \t]+[0-9]+/[0-9]+[ \t]+[A-Z][\w:/-]*[ \t]+[0-9]+"
                    rb"(?: \([0-9smhdy]+ ago\))?[ \t]+[0-9]+[smhdy][0-9smhdy]*[ \t]*(?:\r?$|[ \t]))")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "y": 365 * 86400}
_KINDS = {"pod": "Pod", "node": "Node", "deployment": "Deployment", "replicaset": "ReplicaSet", "job": "Job",
          "persistentvolumeclaim": "PersistentVolumeClaim", "statefulset": "StatefulSet", "daemonset": "DaemonSet",
          "service": "Service", "inferenceservice": "InferenceService"}
K8S_COLUMNS = ("K8S_KIND", "K8S_NAMESPACE", "K8S_NAME", "K8S_TYPE", "K8S_REASON", "K8S_COUNT", "K8S_LAST_SEEN",
               "K8S_FIRST_SEEN", "K8S_SOURCE", "K8S_CONTAINER", "K8S_STATE", "K8S_EXIT_CODE", "K8S_RESTARTS",
               "K8S_MEMORY_LIMIT", "K8S_READY", "K8S_FIRST_AT", "K8S_LAST_AT", "K8S_AGES_FROM")
#: The collect manifest a capture time may come from, and how many folders up from a file it is looked for.
MANIFEST = "collect.json"
MANIFEST_LEVELS = 3


def sniff(head: bytes, path: Path) -> bool:
    """A text whose first 4 KiB hold a kubectl table header or a describe's `Events:` heading."""
    return not path.is_dir() and bool(head) and b"\x00" not in head[:1024] and bool(_SNIFF.search(head))


AGE_DIGITS = 9  # kubectl writes ages in units up to years: 999,999,999 of any is past every clock


def age_seconds(age: str | None) -> int | None:
    """kubectl's age ("3m41s", "2d", "60m") in seconds; None for `<unknown>` / `<invalid>`."""
    if not age or age.startswith("<"):
        return None
    parts = re.findall(r"([0-9]+)([smhdy])", age)
    if any(len(number) > AGE_DIGITS for number, _ in parts):  # no clock counts that far: not an age
        return None
    return sum(int(n) * _SECONDS[unit] for n, unit in parts)


def counted_back(now: datetime, seconds: int) -> datetime | None:
    """`seconds` before `now`; None where that is before year 1 (a forged age or capture date)."""
    try:
        return now - timedelta(seconds=seconds)
    except OverflowError:
        return None


def _now(lines: list[str]) -> datetime | None:
    """The capture's own time: the last `date` line before the output (`Sat Feb 21 21:00:31 UTC 2026`)."""
    found = None
    for line in lines:
        if (m := DATE_LINE.match(line.strip())) and (m["zone"] in (None, "UTC", "GMT")):
            found = datetime.strptime(f"{m['day']} {m['month']} {m['year']} {m['time']} +0000", "%d %b %Y %H:%M:%S %z")
    return found


def capture_now(lines: list[str], path: Path) -> tuple[datetime | None, str | None]:
    """The "now" kubectl's ages count back from, and where it was found: the file's capture header
    (`# capture ts=…`, as `collect` writes it), else a `date` line in the paste, else the time the
    bundle's collect manifest (`collect.json` in a folder above, `kubernetes.captured`) says the
    cluster was read. None when the capture gives none: never the file's modification time."""
    for line in lines[:5]:
        if (words := parse_header(line)) is not None and (found := parse_time(words.get("ts", ""))) and found[1]:
            return found[0], f"the file's capture header ({found[0]:%Y-%m-%d %H:%M:%S} UTC)"
    if (dated := _now(lines)) is not None:
        return dated, f"the capture's own `date` line ({dated:%Y-%m-%d %H:%M:%S} UTC)"
    for folder in list(path.parents)[:MANIFEST_LEVELS]:
        manifest = folder / MANIFEST
        try:
            said = json.loads(manifest.read_text()).get("kubernetes", {}).get("captured") if manifest.is_file() else None
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(said, str) and (found := parse_time(said)) and found[1]:
            return found[0], f"the collect manifest {folder.name}/{MANIFEST} ({found[0]:%Y-%m-%d %H:%M:%S} UTC)"
    return None, None


def _wide(fields: dict[str, str | None]) -> dict[str, str | None]:
    """A header-less row of `get events -o wide`: its subobject and source before the message and its
    first sighting and count after it taken out of the message; other rows as they are."""
    tail = _WIDE_TAIL.match(fields.get("message") or "")
    if tail is None:
        return fields
    return {**fields, "source": tail["source"], "message": tail["message"], "over": tail["first"],
            "count": tail["count"]}


def _object(text: str, namespace: str | None) -> tuple[str, str | None, str]:
    kind, _, name = text.partition("/")
    return _KINDS.get(kind.lower(), kind), namespace, name


class _Reader:
    """Walks the lines once, keeping the table or block each line belongs to."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.rows: list[dict[str, object]] = []
        self.bad: list[tuple[int, str, str]] = []
        self.columns: list[tuple[str, int]] | None = None  # an events table's titles and where they start
        self.table = ""  # events, describe_events, pods, describe
        self.blocks = DescribeBlocks(self.rows)  # the describe blocks, whose rows join these
        self.legacy = False  # the current events table is describe's tab-separated one (before 1.14)
        self.awaiting_message = False  # the row above was a header-less event row wrapped before its message

    def read(self) -> None:
        for number, raw in enumerate(self.lines, 1):
            line = raw.rstrip("\r\n")
            awaiting, self.awaiting_message = self.awaiting_message, False  # the very next line, or none
            if not line.strip():
                if self.table in ("events", "pods"):
                    self.table = ""
                continue
            if awaiting and not _ROW.match(line) and not _DESCRIBE_ROW.match(line) and not _POD_ROW.match(line) \
                    and not _ANY_HEADER.match(line) and not line.startswith("Name:"):
                self.rows[-1]["message"] = f"{self.rows[-1]['message']} {line.strip()}"  # its message, wrapped
                continue
            if _EVENTS_HEADER.match(line) or _LEGACY_HEADER.match(line):
                self._header(line, "events")
            elif _DESCRIBE_EVENTS.match(line):
                self._header(line, "describe_events")
            elif _LEGACY_DESCRIBE_EVENTS.match(line):
                self._header(line, "describe_events")
                self.legacy = True
            elif _PODS_HEADER.match(line):
                self._header(line, "pods")
            elif self.table in ("events", "describe_events") and self._event(line, number):
                pass
            elif self.table == "pods" and self._pod(line, number):
                pass
            elif (m := _ROW.match(line)) is not None:
                self._event_row(_wide(m.groupdict()), number, line)  # a row without its header (grep-filtered)
                self.awaiting_message = not m["message"]  # a paste wrapped it before its message
            elif (m := _DESCRIBE_ROW.match(line)) is not None:
                fields = m.groupdict()  # a describe's Events row pasted without its heading
                fields.update(self.blocks.described("object"))
                self._event_row(fields, number, line)
            elif self.table != "describe" and self._pod(line, number):
                pass  # a `get pods` row without its header (grep-filtered)
            elif self.blocks.command(line):  # it ends the table or block above it; kept with its line
                self.table = ""
                self.bad.append((number, "a line outside kubectl's tables and describe blocks", line))
            elif (read := self.blocks.read(line, number)):
                if read == "begun":
                    self.table = "describe"  # a describe block ends the table above it
            elif self.rows and self.table in ("events", "describe_events") and line[:1] in (" ", "\t"):
                self.rows[-1]["message"] = f"{self.rows[-1]['message']} {line.strip()}"  # a wrapped message
            elif re.fullmatch(r"\s*-+(\s+-+)*\s*", line) or DATE_LINE.match(line.strip()) or \
                    line.startswith("# capture "):
                continue  # the dashes under a describe's table titles; the capture's `date` line or header (read above)
            else:
                self.bad.append((number, "a line outside kubectl's tables and describe blocks", line))
        self.blocks.close()

    def _header(self, line: str, table: str) -> None:
        self.table, self.legacy = table, False
        titles = re.finditer(r"\S+(?: \S+)*", line) if table != "describe_events" else re.finditer(r"\S+", line)
        self.columns = [(t.group().replace("LASTSEEN", "LAST SEEN").replace("FIRSTSEEN", "FIRST SEEN"), t.start())
                        for t in titles]
        if table == "describe_events":
            self.blocks.events_table()

    def _cut(self, line: str) -> dict[str, str]:
        """A row cut where its table's titles start; the last title takes the rest of the line."""
        assert self.columns is not None
        out = {}
        for (title, start), following in zip(self.columns, [*self.columns[1:], ("", len(line))], strict=True):
            out[title] = line[start:following[1]].strip()
        return out

    def _legacy_event(self, line: str, number: int) -> bool:
        """A row of the tab-separated describe table: first, last, count, from, [subobject], type, …"""
        cells = [c.strip() for c in line.split("\t") if c.strip()]
        kinds = [i for i, c in enumerate(cells) if c in ("Normal", "Warning")]
        if len(cells) < 6 or not kinds or age_seconds(cells[0]) is None:
            return False
        at = kinds[0]
        self._event_row({"last": cells[1], "over": cells[0], "count": cells[2], "source": cells[3].strip("{} "),
                         "type": cells[at], "reason": cells[at + 1] if at + 1 < len(cells) else None,
                         "message": " ".join(cells[at + 2:]), **self.blocks.described("object")},
                        number, line)
        return True

    def _event(self, line: str, number: int) -> bool:
        if self.table == "describe_events" and self.legacy:
            return self._legacy_event(line, number)
        if self.table == "describe_events":
            if (m := _DESCRIBE_ROW.match(line)) is None:
                return False
            fields = m.groupdict()
            fields.update(self.blocks.described("Pod"))
            if fields["object"] == "Node/" and (on := re.fullmatch(r"kubelet, (\S+)", fields.get("source") or "")):
                fields["object"] = f"Node/{on[1]}"  # a node's own kubelet reports its events: the node's name
            self._event_row(fields, number, line)
            return True
        cells = self._cut(line)
        if cells.get("TYPE") not in ("Normal", "Warning"):
            return False
        last = cells.get("LAST SEEN", "")
        count = over = None
        if (m := re.fullmatch(rf"({_AGE}) \(x([0-9]+) over ({_AGE})\)", last)):
            last, count, over = m[1], m[2], m[3]
        obj = cells.get("OBJECT") or (f"{cells.get('KIND', '?')}/{cells.get('NAME', '?')}" if "KIND" in cells else "")
        self._event_row({"namespace": cells.get("NAMESPACE"), "last": last, "count": cells.get("COUNT") or count,
                         "over": cells.get("FIRST SEEN") or over, "type": cells["TYPE"], "reason": cells.get("REASON"),
                         "object": obj, "source": cells.get("SOURCE"), "message": cells.get("MESSAGE", "")},
                        number, line)
        return True

    def _event_row(self, f: dict[str, str | None], number: int, line: str) -> None:
        kind, namespace, name = _object(f.get("object") or "?/?", f.get("namespace"))
        count = f.get("count")
        said = f" (x{count} over {f.get('over')})" if count and f.get("over") else ""
        where = named(kind, namespace, name)
        self.rows.append({
            "source_line": number, "K8S_KIND": kind, "K8S_NAMESPACE": namespace, "K8S_NAME": name or None,
            "K8S_TYPE": f.get("type"), "K8S_REASON": f.get("reason"), "K8S_COUNT": count or "1",
            "K8S_LAST_SEEN": f.get("last"), "K8S_FIRST_SEEN": f.get("over") or f.get("last"),
            "K8S_SOURCE": f.get("source"), "priority": 4 if f.get("type") == "Warning" else 6,
            "message": f"{f.get('type')} {f.get('reason')} {where}{said}: {f.get('message') or ''}".rstrip()})

    def _pod(self, line: str, number: int) -> bool:
        if (m := _POD_ROW.match(line)) is None:
            return False
        status, restarts = m["status"], m["restarts"].split()[0]
        bad = status not in ("Running", "Completed", "Succeeded", "ContainerCreating", "Terminating")
        namespace = m["namespace"]
        where = named("Pod", namespace, m["name"])
        ago = f", the last {m['ago']} ago" if m["ago"] else ""
        # The pod's age is when it was made, not when what it shows began: no first sighting is given.
        self.rows.append({
            "source_line": number, "K8S_KIND": "Pod", "K8S_NAMESPACE": namespace, "K8S_NAME": m["name"],
            "K8S_TYPE": "Warning" if bad else "Normal", "K8S_REASON": status, "K8S_STATE": status,
            "K8S_RESTARTS": restarts, "K8S_READY": m["ready"], "K8S_LAST_SEEN": m["ago"],
            "priority": 4 if bad else 6,
            "message": f"{'Warning' if bad else 'Normal'} {status} {where}: ready {m['ready']}, {restarts} restarts{ago}, "
                       f"age {m['age']}"})
        return True



def parse(path: Path) -> ParseResult:
    """One `events` row per event, pod and container kubectl printed; other lines quarantined."""
    lines = bytes(read_all(path)).decode("utf-8", "replace").splitlines()
    reader = _Reader(lines)
    reader.read()
    quarantine = quarantine_rows(str(path), FORMAT, [(n, why, text, None) for n, why, text in reader.bad])
    if not reader.rows:
        return ParseResult("events", empty(EVENTS_SCHEMA), quarantine, len(reader.bad))
    now, said = capture_now(lines, path)
    notes = ([f"kubectl's ages are counted back from {said}"] if now else
             ["kubectl prints ages, not times, and the capture gives no time of its own (a capture header, a `date` "
              "line, a collect manifest): its rows are read at no time, their ages kept as written"])
    for row in reader.rows:
        row["ts"] = _when(row, now)
        row.pop("finished", None)
        if now is not None:
            row.update(_seen_at(row, now), K8S_AGES_FROM=said)
    return ParseResult("events", object_events(reader.rows, path, DATA_TYPE, FORMAT), quarantine,
                       len(reader.rows) + len(reader.bad), notes=notes)


def _when(row: dict[str, object], now: datetime | None) -> datetime | None:
    """A row's time: a container's Finished as describe wrote it, else its age before the capture."""
    finished = row.get("finished")
    if isinstance(finished, str):
        try:
            return datetime.strptime(finished, _RFC1123)
        except ValueError:
            pass
    seconds = age_seconds(row.get("K8S_LAST_SEEN") if isinstance(row.get("K8S_LAST_SEEN"), str) else None)
    return counted_back(now, seconds) if now is not None and seconds is not None else None


def _seen_at(row: dict[str, object], now: datetime) -> dict[str, str | None]:
    """A row's first and last sightings as times (ISO 8601, UTC), its ages counted back from `now`."""
    out: dict[str, str | None] = {}
    for age, at in (("K8S_FIRST_SEEN", "K8S_FIRST_AT"), ("K8S_LAST_SEEN", "K8S_LAST_AT")):
        seconds = age_seconds(row.get(age) if isinstance(row.get(age), str) else None)  # type: ignore[arg-type]
        back = counted_back(now, seconds) if seconds is not None else None
        out[at] = back.isoformat() if back is not None else None
    return out


def object_events(rows: list[dict[str, Any]], path: Path, data_type: str, fmt: str) -> pl.DataFrame:
    """kubectl rows (ts, priority, message, source_line, K8S_* columns) as the canonical events frame."""
    frame = pl.DataFrame(rows, infer_schema_length=None)
    k8s = [pl.col(c).cast(pl.String) if c in frame.columns else pl.lit(None, pl.String).alias(c) for c in K8S_COLUMNS]
    events = frame.select(
        pl.col("ts").cast(EVENTS_SCHEMA["ts"]),
        pl.lit(None, pl.Int64).alias("__REALTIME_TIMESTAMP"), pl.lit(None, pl.Int64).alias("__MONOTONIC_TIMESTAMP"),
        pl.lit(None, pl.String).alias("_BOOT_ID"), pl.lit(None, pl.String).alias("__CURSOR"),
        pl.lit(None, pl.String).alias("host"), pl.lit("kubernetes").alias("unit"),
        pl.lit("kubectl").alias("identifier"), pl.lit(None, pl.Int64).alias("pid"),
        pl.col("priority").cast(pl.Int8), pl.lit(None, pl.String).alias("message_id"),
        pl.lit(None, pl.String).alias("invocation_id"), pl.col("message").cast(pl.String),
        pl.lit(data_type).alias("data_type"), pl.lit(fmt).alias("format"), pl.lit(str(path)).alias("source_file"),
        pl.lit(None, pl.Int64).alias("source_offset"), pl.col("source_line").cast(pl.Int64),
        pl.lit(None, EVENTS_SCHEMA["raw_fields"]).alias("raw_fields"), *k8s)
    return as_events(events)


register(NAME, sniff, parse, module=__name__)
