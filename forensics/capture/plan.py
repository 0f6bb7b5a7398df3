"""What a collection is asked to take (`Plan`), and the checks its values pass before anything runs:
a plan's values end up in a script run as root on the wedged host, so each is checked by type and
shape (`plan_problems`, `checked`); a plan may also be read from a small TOML file (`plan_from_toml`).
"""

from __future__ import annotations

import math
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forensics.errors import ForensicsError


class CollectError(ForensicsError):
    """A collection could not start (its output folder cannot be written)."""


@dataclass
class Plan:
    """What to collect, with defaults that work with no flags."""

    out: Path
    units: list[str] = field(default_factory=list)
    since: str = "-1h"
    until: str | None = None
    journal: Path | None = None  # a journal directory or file instead of the running journald
    endpoints: list[str] = field(default_factory=list)  # [GROUP=]host:port or URL of /metrics
    scrapes: int = 3
    scrape_interval_s: float = 5.0
    titles: list[str] = field(default_factory=list)  # process-title patterns (default: the profile's)
    pids: dict[str, list[int]] = field(default_factory=dict)  # group -> pids
    rounds: int = 2
    round_interval_s: float = 2.0
    native: bool = False
    host: str = field(default_factory=socket.gethostname)
    # When the stack rounds start (seconds since the epoch): hosts collected together start their
    # rounds at the same moment (`forensics.capture.fleet`); None: at once.
    start_at: int | None = None


# What a plan's values may look like: they end up in a script run as root on the wedged host, so
# each is checked by type and shape here and quoted by `sh_quote` there, with no other way in.
UNIT_NAME = re.compile(r"[A-Za-z0-9:_.@\\-]{1,255}")  # systemd.unit(5): ASCII letters, digits, ":-_.\\", "@"
GROUP_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
HOST_NAME = re.compile(r"[A-Za-z0-9_.-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\]")
URL_PATH = re.compile(r"/[A-Za-z0-9_.~/%-]*")
TIME_SPEC = re.compile(r"[A-Za-z0-9 :.+@-]{1,64}")  # journalctl --since/--until: dates, "-1h", "yesterday"
PID_MAX = 4_194_304  # the kernel's largest pid_max
LIMITS = {"scrapes": (1, 100), "rounds": (1, 50), "scrape_interval_s": (0.0, 600.0), "round_interval_s": (0.0, 600.0)}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def endpoint_parts(endpoint: str) -> tuple[str | None, str, str, int]:
    """(group, URL, host, port) of a metrics endpoint written `[GROUP=]PORT`, `[GROUP=]HOST:PORT`
    or `[GROUP=]http(s)://HOST[:PORT][/PATH]`; ValueError says what is wrong with it."""
    group, _, target = endpoint.rpartition("=") if "=" in endpoint.split("://", 1)[0] else ("", "", endpoint)
    if group and not GROUP_NAME.fullmatch(group):
        raise ValueError(f"group {_shown(group)} is not letters, digits, '_', '.' or '-'")
    scheme = "http"
    if "://" in target:
        scheme, _, target = target.partition("://")
        if scheme not in ("http", "https"):
            raise ValueError(f"scheme {_shown(scheme)}: only http and https are scraped")
    where, slash, path = target.partition("/")
    path = slash + path if slash else "/metrics"
    if not URL_PATH.fullmatch(path):
        raise ValueError(f"path {_shown(path)} holds characters a metrics path does not")
    host, colon, port_text = where.rpartition(":") if not where.endswith("]") else (where, "", "")
    if not colon:
        host, port_text = ("localhost", where) if where.isdigit() else (where, "443" if scheme == "https" else "80")
    if not HOST_NAME.fullmatch(host) or host.startswith("-"):
        raise ValueError(f"host {_shown(host)} is not a host name or address")
    if not (port_text.isascii() and port_text.isdigit() and 0 < int(port_text) < 65536):
        raise ValueError(f"port {_shown(port_text)} is not a number from 1 to 65535")
    port = int(port_text)
    return group or None, f"{scheme}://{host}:{port}{path}", host.strip("[]"), port


def plan_problems(plan: Plan) -> list[str]:
    """Every way the plan's values break their types and shapes, each with the field it is in;
    empty when the plan is safe to collect with and to write into a script."""
    problems: list[str] = []

    def strings(name: str, values: Any, shape: re.Pattern[str] | None, what: str) -> None:
        if not isinstance(values, list):
            problems.append(f"{name}: expected a list (each {what}), found {type(values).__name__} {_shown(values)}")
            return
        for n, value in enumerate(values):
            if not isinstance(value, str):
                problems.append(f"{name}[{n}]: expected {what}, found {type(value).__name__} {_shown(value)}")
            elif shape is not None and (not shape.fullmatch(value) or value.startswith("-")):
                problems.append(f"{name}[{n}]: {_shown(value)} is not {what}")

    strings("units", plan.units, UNIT_NAME, "a systemd unit name")
    strings("titles", plan.titles, None, "a process-title pattern")
    for n, title in enumerate(plan.titles if isinstance(plan.titles, list) else []):
        if isinstance(title, str):
            if not title or len(title) > 200 or not title.isprintable():
                problems.append(f"titles[{n}]: {_shown(title)} is not a printable pattern of 1 to 200 characters")
            else:
                try:
                    re.compile(title)
                except re.error as error:
                    problems.append(f"titles[{n}]: {_shown(title)} is not a regular expression ({error})")
    strings("endpoints", plan.endpoints, None, "an endpoint ([GROUP=]HOST:PORT or an http(s) URL)")
    for n, endpoint in enumerate(plan.endpoints if isinstance(plan.endpoints, list) else []):
        if isinstance(endpoint, str):
            try:
                endpoint_parts(endpoint)
            except ValueError as error:
                problems.append(f"endpoints[{n}]: {_shown(endpoint)}: {error}")
    if not isinstance(plan.pids, dict):
        problems.append(f"pids: expected a table of GROUP = [PID, …], found {type(plan.pids).__name__}")
    else:
        for group, members in plan.pids.items():
            if not isinstance(group, str) or not GROUP_NAME.fullmatch(group):
                problems.append(f"pids.{_shown(group)}: a group is letters, digits, '_', '.' or '-'")
            if not isinstance(members, list):
                problems.append(f"pids.{group}: expected a list of process ids, found {type(members).__name__}")
                continue
            for n, pid in enumerate(members):
                if not _is_int(pid) or not 0 < pid <= PID_MAX:
                    problems.append(f"pids.{group}[{n}]: expected a process id (1 to {PID_MAX}), found {_shown(pid)}")
    for name, (low, high) in LIMITS.items():
        value = getattr(plan, name)
        whole = name in ("scrapes", "rounds")
        fits = _is_int(value) if whole else (_is_int(value) or isinstance(value, float))
        if not fits or not math.isfinite(value) or not low <= value <= high:
            problems.append(f"{name}: expected {'a whole number' if whole else 'a number of seconds'} from {low:g} "
                            f"to {high:g}, found {_shown(value)}")
    for name in ("since", "until"):
        value = getattr(plan, name)
        if value is None and name == "until":
            continue
        if not isinstance(value, str) or not TIME_SPEC.fullmatch(value):
            problems.append(f"{name}: expected a journalctl time (\"-1h\", \"2026-06-18 21:30\"), found {_shown(value)}")
    if plan.journal is not None:
        text = str(plan.journal)
        if not isinstance(plan.journal, (str, Path)) or not text.isprintable() or text.startswith("-"):
            problems.append(f"journal: expected the path of a journal folder or file, found {_shown(plan.journal)}")
    if plan.start_at is not None and (not _is_int(plan.start_at) or not 0 < plan.start_at < 1 << 40):
        problems.append(f"start_at: expected seconds since the epoch, found {_shown(plan.start_at)}")
    if not isinstance(plan.native, bool):
        problems.append(f"native: expected true or false, found {_shown(plan.native)}")
    if not isinstance(plan.host, str) or not HOST_NAME.fullmatch(plan.host):
        problems.append(f"host: {_shown(plan.host)} is not a host name")
    return problems


def checked(plan: Plan, where: str = "collect") -> Plan:
    """The plan, after `plan_problems` found nothing; else a CollectError listing every problem."""
    _refuse(where, plan_problems(plan))
    return plan


def _refuse(where: object, problems: list[str]) -> None:
    if problems:
        raise CollectError(f"{where}: {len(problems)} problem{'s' if len(problems) > 1 else ''}: "
                           + "; ".join(problems))


def plan_from_toml(path: Path, out: Path) -> Plan:
    """A plan from a small TOML file whose keys are `Plan`'s fields (units, endpoints, titles,
    pids = {decode = [1, 2]}, rounds, …); unknown keys and wrong types are all named, with their path."""
    import tomllib

    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise CollectError(f"{path}: {error}") from None
    known = {f for f in Plan.__dataclass_fields__ if f not in ("out", "start_at")}
    problems = [f"{key}: unknown key (known: {', '.join(sorted(known))})" for key in sorted(set(data) - known)]
    plan = Plan(out, **{key: value for key, value in data.items() if key in known})
    if isinstance(plan.journal, str):
        plan.journal = Path(plan.journal)
    _refuse(path, problems + plan_problems(plan))
    return plan
