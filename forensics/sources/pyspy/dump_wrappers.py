"""The lines serving stacks' watchdogs write around the py-spy dumps they take, read from data
(`profiles/pastes/dump_wrappers.toml`): where a line is one, which process it names, and why an
attempt failed. The paste reader (`forensics.sources.pyspy.paste`) turns them back into py-spy's
own layout; this module knows the group names (pid, why, cmd), never a stack's wording.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from forensics.errors import ForensicsError

WRAPPERS_FILE = Path(__file__).resolve().parents[2] / "profiles" / "pastes" / "dump_wrappers.toml"
KINDS = ("dump", "failed", "gave_up")  # a dump follows; one attempt failed; every attempt failed


@dataclass(frozen=True)
class DumpWrapper:
    """One stack's watchdog lines (see the data file's head)."""

    stack: str
    marks: tuple[str, ...]
    dump: re.Pattern[str]
    failed: tuple[re.Pattern[str], ...]
    gave_up: re.Pattern[str] | None
    gave_up_says: str
    samples: tuple[dict[str, object], ...]


@dataclass(frozen=True)
class Wrapped:
    """A watchdog line found: its kind, the pid it names, why the attempt failed ("" for a dump),
    and where its words start in the line (what is before is its log stamp)."""

    kind: str
    pid: str
    why: str
    start: int


def _pattern(path: Path, stack: str, key: str, text: object, groups: tuple[str, ...]) -> re.Pattern[str]:
    try:
        compiled = re.compile(str(text)) if isinstance(text, str) else None
    except re.error as error:
        raise ForensicsError(f"{path}: wrapper {stack!r}: {key} does not compile ({error})") from None
    if compiled is None or not set(groups) <= set(compiled.groupindex):
        raise ForensicsError(f"{path}: wrapper {stack!r}: {key} must be a pattern with the groups "
                             f"{', '.join(groups)}, not {text!r}")
    return compiled


@cache
def wrappers(path: Path = WRAPPERS_FILE) -> tuple[DumpWrapper, ...]:
    """Every stack's watchdog lines; a pattern that does not compile or lacks its groups is an
    error naming the file and the stack."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ForensicsError(f"{path}: {error}") from None
    out = []
    for entry in data.get("wrapper", []):
        stack = str(entry.get("stack", "?"))
        marks = entry.get("marks")
        if not isinstance(marks, list) or not marks or not all(isinstance(m, str) and m for m in marks):
            raise ForensicsError(f"{path}: wrapper {stack!r}: marks must list the texts its lines contain")
        failed = entry.get("failed", [])
        if not isinstance(failed, list):
            raise ForensicsError(f"{path}: wrapper {stack!r}: failed must be a list of patterns")
        out.append(DumpWrapper(
            stack, tuple(marks), _pattern(path, stack, "dump", entry.get("dump"), ("pid",)),
            tuple(_pattern(path, stack, f"failed #{n + 1}", f, ("pid", "why")) for n, f in enumerate(failed)),
            _pattern(path, stack, "gave_up", entry["gave_up"], ("pid",)) if "gave_up" in entry else None,
            str(entry.get("gave_up_says", "every py-spy dump attempt failed")), tuple(entry.get("sample", ()))))
    return tuple(out)


WRAPPER_MARKS = tuple(dict.fromkeys(mark for w in wrappers() for mark in w.marks))


def wrapped(line: str) -> Wrapped | None:
    """The watchdog line `line` is, or None (a failed attempt or a give-up is tried before a dump:
    a stack may word them alike)."""
    for wrapper in wrappers():
        if not any(mark in line for mark in wrapper.marks):
            continue
        for pattern in wrapper.failed:
            if (found := pattern.search(line)) is not None:
                why = found["why"].strip()
                while why.startswith("Error: "):  # the watchdog writes "Error: " before py-spy's own "Error: …"
                    why = why.removeprefix("Error: ")
                command = found.groupdict().get("cmd")
                if command:
                    why = f"{why or 'py-spy failed'} (`{' '.join(command.split())}`)"
                return Wrapped("failed", found["pid"], why or "py-spy failed", found.start())
        if wrapper.gave_up is not None and (found := wrapper.gave_up.search(line)) is not None:
            return Wrapped("gave_up", found["pid"], wrapper.gave_up_says, found.start())
        if (found := wrapper.dump.search(line)) is not None:
            return Wrapped("dump", found["pid"], "", found.start())
    return None
