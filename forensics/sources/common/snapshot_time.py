"""When and where a snapshot was taken: the capture header, the file name, or (last resort) the mtime.

Snapshots (py-spy dumps, `/metrics` scrapes) carry no trustworthy time of their own: py-spy's
output has none, and a scrape's samples rarely carry timestamps. The bundle supplies it, in this
order of preference:

1. **A capture header** the collector writes on its own line before the snapshot::

       # capture ts=2026-06-18T21:40:10Z host=gpu-node-00 pid=4242 group=decode

   `ts` is ISO-8601; with a zone (`Z`, `+02:00`) it is exact (confidence ``high``). The other keys
   are optional: `host`, `pid`, `group` (the engine a rank belongs to, e.g. prefill / decode),
   `title` (the process title as `ps` saw it, useful when the dump itself failed). Values hold no
   spaces. One file may hold many snapshots, each after its own header. A header the tool wrote
   itself counts as one: SGLang's watchdog logs `[2026-07-07 07:20:50] Pyspy dump for PID n (…):`
   before each dump, which `forensics.sources.pyspy.paste` turns into this header (`ts` without a
   zone: read as UTC, ``medium``, and the input's notes say so).
2. **An ISO timestamp in the file name**, or failing that in a folder name on its way into the
   bundle: `2026-06-18T21-40-10Z.txt`, `decode-20260618T214010Z.json`, `21:40:10` is not enough
   (a date is required). With a zone the confidence is ``high``; without one it is read as UTC and
   marked ``medium`` (alignment may still shift it by the host's offset).
3. **The file's modification time**, marked ``low``: copying files around rewrites it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

HEADER_PREFIX = "# capture "
MAX_FOLDERS = 3  # how far up from a file its folders' names may date it

_NAME_TIME = re.compile(
    r"(?P<y>\d{4})-?(?P<mo>\d{2})-?(?P<d>\d{2})[T_ ](?P<h>\d{2})[-:]?(?P<mi>\d{2})[-:]?(?P<s>\d{2})"
    r"(?:[.,](?P<frac>\d{1,6}))?(?P<zone>Z|[+-]\d{2}:?\d{2})?")


@dataclass(frozen=True)
class Capture:
    """The time (UTC) and context of one snapshot, with where the time came from."""

    ts: datetime | None
    ts_source: str  # "header", "file name" or "file mtime"
    ts_confidence: str  # "high", "medium" or "low"
    labels: dict[str, str] = field(default_factory=dict)  # host, pid, group, title when known


def _zone(text: str | None) -> timezone | None:
    if text is None:
        return None
    if text == "Z":
        return UTC
    sign = 1 if text[0] == "+" else -1
    digits = text[1:].replace(":", "")
    return timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))


def parse_time(text: str) -> tuple[datetime, bool] | None:
    """An ISO-8601-like time found in `text` as UTC, and whether it carried a zone; None if absent."""
    match = _NAME_TIME.search(text)
    if not match:
        return None
    g = match.groupdict()
    micro = int((g["frac"] or "0").ljust(6, "0"))
    try:
        naive = datetime(int(g["y"]), int(g["mo"]), int(g["d"]), int(g["h"]), int(g["mi"]), int(g["s"]), micro)
        zone = _zone(g["zone"])
        # an offset of a day or more is no zone; year 1 east of UTC or 9999 west of it has no UTC time
        return (naive.replace(tzinfo=zone or UTC).astimezone(UTC), zone is not None)
    except (ValueError, OverflowError):
        return None


def parse_header(line: str) -> dict[str, str] | None:
    """The key=value words of a capture header line, or None if `line` is not one."""
    if not line.startswith(HEADER_PREFIX):
        return None
    labels = {}
    for word in line[len(HEADER_PREFIX):].split():
        key, sep, value = word.partition("=")
        if sep and value:
            labels[key] = value
    return labels


def from_header(labels: dict[str, str], fallback: Capture) -> Capture:
    """The capture a header describes; its time falls back to `fallback`'s when it has none."""
    found = parse_time(labels["ts"]) if "ts" in labels else None
    if found is None and "ts" in labels:  # said, but unreadable: the fallback is a guess, and flagged
        return Capture(fallback.ts, f"{fallback.ts_source} (header ts={labels['ts'][:40]} is not a time)", "low",
                       {**fallback.labels, **labels})
    if found is None:
        return Capture(fallback.ts, fallback.ts_source, fallback.ts_confidence, {**fallback.labels, **labels})
    ts, zoned = found
    return Capture(ts, "header", "high" if zoned else "medium", labels)


def from_path(path: Path) -> Capture:
    """The capture time a file's name (or its folders' names) gives, else its mtime."""
    for part in (path.name, *(p.name for p in list(path.parents)[:MAX_FOLDERS])):
        found = parse_time(part)
        if found is not None:
            ts, zoned = found
            return Capture(ts, "file name", "high" if zoned else "medium")
    mtime = datetime.fromtimestamp(path.stat().st_mtime, UTC)
    return Capture(mtime, "file mtime", "low")
