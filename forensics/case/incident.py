"""The incident manifest, `BUNDLE/incident.toml`: what people know that the evidence does not say.

    title = "…"
    window = ["2026-06-18T21:20:00Z", "2026-06-18T21:45:00Z"]     # optional; else the data's span
    metrics = ["DCGM_FI_DEV_MEM_COPY_UTIL"]   # metric names to draw beyond the profile's panels

    [hosts."gpu-node-00"]
    time_zone = "Asia/Shanghai"      # the zone SGLang's log-line stamps are written in (default UTC)
    clock_offset_s = 7.5             # host clock minus true time, if known (else estimated, or 0)

    [components.decode]              # which unit / port / process title / stack group is which
    units = ["sglang-dsv4-decode.service"]
    ports = [30002]
    process_titles = ["sglang::scheduler_TP*"]
    stacks_group = "decode"

    [[annotations]]                  # human notes on the timeline
    at = "2026-06-18T21:40:45Z"
    text = "restart issued"

    [inputs]                         # where the inputs lie (globs relative to the bundle); when
    journal = ["journal/*.export*"]  # given, only these are read and every glob must match
    metrics = ["metrics/*/*"]

Every key is optional and a bundle without the file works: components are then guessed from unit
names and stack groups by the profile's component words, and the guess is reported.
"""

from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from forensics.errors import ForensicsError
from forensics.profiles import Profile, load_profile

MANIFEST = "incident.toml"


class ManifestError(ForensicsError):
    """incident.toml cannot be read, or holds a value that cannot be used."""


@dataclass(frozen=True)
class HostClock:
    """A host's time zone and clock offset (host clock minus true time); None when not known, in
    which case `forensics.timeline.clocks` estimates it from requests seen on two hosts, if it can."""

    time_zone: ZoneInfo
    clock_offset_s: float | None


@dataclass(frozen=True)
class Component:
    """Which units, ports, process titles and stack groups make a component."""

    name: str
    units: tuple[str, ...] = ()
    ports: tuple[int, ...] = ()
    process_titles: tuple[str, ...] = ()
    stacks_group: str | None = None


@dataclass(frozen=True)
class Annotation:
    """A human note at a time."""

    at: datetime
    text: str


@dataclass
class Incident:
    """The manifest as read (or as guessed when there is none)."""

    title: str
    window: tuple[datetime, datetime] | None
    hosts: dict[str, HostClock]
    components: dict[str, Component]
    annotations: list[Annotation]
    guessed: bool
    inputs: list[str] = field(default_factory=list)  # globs from [inputs]; empty: every file is sniffed
    notes: list[str] = field(default_factory=list)  # what was guessed, in words
    metrics: list[str] = field(default_factory=list)  # metric names the report must draw, beyond the profile's
    title_written: bool = False  # the title is the user's own words (incident.toml), not the bundle's name

    def clock(self, host: str | None) -> HostClock:
        """A host's clock; UTC and no offset unless the manifest says."""
        return self.hosts.get(host or "", HostClock(ZoneInfo("UTC"), None))

    def component_of_unit(self, unit: str | None, profile: Profile) -> str | None:
        """The component a unit belongs to: the manifest's list, else the profile's words."""
        for component in self.components.values():
            if unit and any(fnmatch.fnmatch(unit, pattern) for pattern in component.units):
                return component.name
        return profile.component_of(unit) if not self.components or self.guessed else None

    def component_of_instance(self, instance: str | None, profile: Profile) -> str | None:
        """The component a metrics instance (host:port) belongs to."""
        port = (instance or "").rpartition(":")[2]
        for component in self.components.values():
            if port.isdigit() and int(port) in component.ports:
                return component.name
        return None


def _time(path: Path, key: str, value: Any) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        raise ManifestError(f"{path}: {key}: {value!r} is not an ISO-8601 time") from None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).astimezone(UTC)


def _is_time(value: Any) -> bool:
    if isinstance(value, datetime):
        return True
    try:
        datetime.fromisoformat(str(value))
    except ValueError:
        return False
    return isinstance(value, str)


def _named(value: Any) -> str:
    kind = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array",
            dict: "a table"}.get(type(value), type(value).__name__)
    return f"{kind} ({str(value)[:40]!r})"


_CHECKS = {"string": lambda v: isinstance(v, str),
           "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
           "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
           "time": _is_time}


def _type_problem(value: Any, kind: str) -> str | None:
    """Why `value` is not of `kind` (a key of `_CHECKS`, or "list of " one of them), or None."""
    item_kind = kind.removeprefix("list of ")
    if item_kind == kind:
        return None if _CHECKS[kind](value) else f"expected a {kind}, found {_named(value)}"
    if not isinstance(value, list):
        return f"expected a list of {item_kind}s, found {_named(value)}"
    bad = [v for v in value if not _CHECKS[item_kind](v)]
    return f"expected a list of {item_kind}s, found {_named(bad[0])} in it" if bad else None


# The keys incident.toml may hold, and the type of each value.
_TOP = {"title": "string", "window": "window", "hosts": "hosts", "components": "components",
        "annotations": "annotations", "inputs": "inputs", "metrics": "list of string"}
_HOST = {"time_zone": "string", "clock_offset_s": "number"}
_COMPONENT = {"units": "list of string", "ports": "list of integer", "process_titles": "list of string",
              "stacks_group": "string"}
_ANNOTATION = {"at": "time", "text": "string"}


def schema_problems(data: dict[str, Any]) -> list[str]:
    """Every wrong type, unknown key and missing key of a parsed incident.toml, each with its path
    (`components.decode.ports: expected a list of integers, found a string ('a') in it`), as
    patito reports a frame: all at once."""
    problems: list[str] = []

    def table(value: Any, where: str, keys: dict[str, str]) -> None:
        if not isinstance(value, dict):
            problems.append(f"{where}: expected a table, found {_named(value)}")
            return
        for key, item in value.items():
            path = f"{where}.{key}" if where else key
            if key not in keys:
                problems.append(f"{path}: unknown key (known: {', '.join(keys)})")
            elif keys[key].removeprefix("list of ") in _CHECKS:
                if (why := _type_problem(item, keys[key])) is not None:
                    problems.append(f"{path}: {why}")
            else:
                special(item, path, keys[key])

    def tables(value: Any, where: str, keys: dict[str, str]) -> None:
        if not isinstance(value, dict):
            problems.append(f"{where}: expected a table of tables, found {_named(value)}")
            return
        for name, item in value.items():
            table(item, f"{where}.{name}", keys)

    def special(value: Any, where: str, kind: str) -> None:
        if kind == "window":
            if not isinstance(value, list) or len(value) != 2:
                problems.append(f"{where}: expected [start, end], two ISO-8601 times")
            else:
                problems.extend(f"{where}[{n}]: {why}" for n, v in enumerate(value)
                                if (why := _type_problem(v, "time")) is not None)
        elif kind == "hosts":
            tables(value, where, _HOST)
        elif kind == "components":
            tables(value, where, _COMPONENT)
        elif kind == "annotations":
            if not isinstance(value, list):
                problems.append(f"{where}: expected an array of tables ([[annotations]])")
                return
            for n, note in enumerate(value):
                table(note, f"{where}[{n}]", _ANNOTATION)
                if isinstance(note, dict):
                    problems.extend(f"{where}[{n}].{key}: missing" for key in _ANNOTATION if key not in note)
        elif kind == "inputs":
            if not isinstance(value, dict):
                problems.append(f"{where}: expected a table of glob lists")
                return
            problems.extend(f"{where}.{key}: {why}" for key, globs in value.items()
                            if (why := _type_problem(globs, "list of string")) is not None)

    table(data, "", _TOP)
    return problems


def find_manifest(bundle: Path) -> tuple[Path | None, str | None]:
    """The bundle's incident.toml: at its top, else the shallowest one in its folders (a bundle
    tarred with a top-level folder, or copied in one), and a note naming it and any it passed over."""
    top = bundle / MANIFEST
    if top.is_file():
        return top, None
    found = sorted((p for depth in ("*/", "*/*/") for p in bundle.glob(depth + MANIFEST) if p.is_file()),
                   key=lambda p: (len(p.relative_to(bundle).parts), str(p)))
    if not found:
        return None, None
    others = [str(p.relative_to(bundle)) for p in found[1:]]
    return found[0], (f"{found[0].relative_to(bundle)} used as the bundle's {MANIFEST}"
                      + (f" (also found, not used: {', '.join(others)})" if others else ""))


def load_incident(bundle: Path, profile: Profile | None = None, profile_matched: bool = True) -> Incident:
    """The bundle's incident.toml, or a guessed manifest when there is none (`profile_matched`:
    whether `profile` is the evidence's own, or the default taken for want of any)."""
    profile = profile or load_profile()
    path, found_note = find_manifest(bundle)
    if path is None:
        whose = (f"the {profile.name} profile's words" if profile_matched else
                 f"the default profile's words (no serving profile matched; {profile.name}'s)")
        return Incident(title=bundle.name, window=None, hosts={}, components={}, annotations=[], guessed=True,
                        notes=[(f"no {MANIFEST}: components guessed from unit names and stack groups with "
                               f"{whose} ({', '.join(profile.components)})")])
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise ManifestError(f"{path}: {error}") from None
    problems = schema_problems(data)
    if problems:
        raise ManifestError(f"{path}: {len(problems)} problem{'s' if len(problems) > 1 else ''}: "
                            + "; ".join(problems))
    window = None
    if "window" in data:
        if not isinstance(data["window"], list) or len(data["window"]) != 2:
            raise ManifestError(f"{path}: window must be [start, end]")
        window = (_time(path, "window[0]", data["window"][0]), _time(path, "window[1]", data["window"][1]))
        if window[1] <= window[0]:
            raise ManifestError(f"{path}: window ends before it starts")
    hosts = {}
    for name, table in data.get("hosts", {}).items():
        try:
            zone = ZoneInfo(table.get("time_zone", "UTC"))
        except (ZoneInfoNotFoundError, ValueError):
            raise ManifestError(f"{path}: hosts.{name}.time_zone: unknown time zone "
                                f"{table.get('time_zone')!r}") from None
        offset = table.get("clock_offset_s")
        hosts[name] = HostClock(zone, float(offset) if offset is not None else None)
    components = {}
    for name, table in data.get("components", {}).items():
        components[name] = Component(name, tuple(table.get("units", [])), tuple(int(p) for p in table.get("ports", [])),
                                     tuple(table.get("process_titles", [])), table.get("stacks_group"))
    annotations = []
    for n, note in enumerate(data.get("annotations", [])):
        if "at" not in note or "text" not in note:
            raise ManifestError(f"{path}: annotations #{n + 1} needs 'at' and 'text'")
        annotations.append(Annotation(_time(path, f"annotations #{n + 1} at", note["at"]), str(note["text"])))
    inputs = []
    for kind, globs in data.get("inputs", {}).items():
        if not isinstance(globs, list) or not all(isinstance(g, str) for g in globs):
            raise ManifestError(f"{path}: inputs.{kind} must be a list of glob patterns")
        inputs += globs
    return Incident(title=str(data.get("title", bundle.name)), window=window, hosts=hosts, components=components,
                    annotations=sorted(annotations, key=lambda a: a.at), guessed=False, inputs=inputs,
                    metrics=list(data.get("metrics", [])), notes=[found_note] if found_note else [],
                    title_written="title" in data)
