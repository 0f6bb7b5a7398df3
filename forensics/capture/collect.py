"""`forensics collect OUT`: capture the evidence on the affected host before anyone restarts it.

Read-only and time-bounded: every step runs with a timeout, nothing is restarted or signalled
(py-spy pauses a process for the instant of a dump), nothing is written outside OUT. It writes a
bundle in the layout the suite reads, with capture headers:

- `journal/<host>.export`: `journalctl -o export` of the window (`--since`, default the last hour,
  `--until`), for the given units — `-u` also takes systemd's own messages about them — or the
  whole journal; `--journal DIR|FILE` reads a copied journal instead of the running journald;
- `metrics/<host>_<port>/scrapes.prom`: a few scrapes of each metrics endpoint at an interval;
- `stacks/round-N.txt`: N rounds of `py-spy dump` (`--native` on request) of every process in the
  units' cgroups, of processes whose title matches the profile's (or given) patterns, and of pids
  given outright (`--pids decode=123,124`); a failed dump keeps py-spy's own error, so the verdict
  names that rank as missing and why;
- `journal/<host>-kernel.export`: the kernel's messages of the window (`journalctl -k`; else
  `logs/<host>/dmesg.log` from `dmesg`): Xid lines, the OOM killer;
- `gpu/`: `nvidia-smi -q` and `-q -d PIDS` (else Ascend's `npu-smi info`);
- `flight_recorder/<host>/`: PyTorch Flight Recorder dumps, found at the prefixes the dumped
  processes' environment names (`TORCH_FR_DUMP_TEMP_FILE`, `TORCH_NCCL_DEBUG_INFO_TEMP_FILE`, read
  from /proc/PID/environ), else torch's default `/tmp/nccl_trace_rank_`;
- `units/<unit>.status.txt`: `systemctl status` (restart counters in collect.json's `NRestarts`);
- `collect.json`: `systemctl show` of each unit, GPU state from `nvidia-smi`, the host's time zone
  and clock offset (chrony or timesyncd), and everything that could not be had, with why;
- `incident.toml`: filled with what was found (window, the host's zone, components from unit names
  and process titles, ports), for a person to complete.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from forensics.capture.http import Failure, fetch
from forensics.errors import ForensicsError

STEP_TIMEOUT_S = 30.0  # no step of a collection may take longer
COLLECT_FILE = "collect.json"


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


@dataclass
class Collection:
    """What a collection did and could not do."""

    out: Path
    written: list[str] = field(default_factory=list)
    missing: list[dict[str, str]] = field(default_factory=list)  # what could not be had, and why
    facts: dict[str, Any] = field(default_factory=dict)

    def could_not(self, what: str, why: str) -> None:
        """Record what could not be collected and why (never silently dropped)."""
        self.missing.append({"what": what, "why": why})


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _run(argv: list[str], timeout: float = STEP_TIMEOUT_S) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, capture_output=True, timeout=timeout, check=False)


def collect(plan: Plan) -> Collection:
    """Collect into `plan.out` (created; an existing non-empty folder is refused)."""
    checked(plan)
    out = plan.out
    if out.exists() and any(out.iterdir()):
        raise CollectError(f"{out}: exists and is not empty; collect writes a new bundle")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise CollectError(f"{out}: cannot be written ({error.strerror})") from None
    done = Collection(out)
    started = datetime.now(UTC)
    _journal(plan, done)
    _scrapes(plan, done)
    groups = _processes(plan, done)
    _stacks(plan, groups, done)
    _flight_recorder(plan, groups, done)
    _kernel(plan, done)
    _units(plan, done)
    _gpus(plan, done)
    _clock(done)
    _incident(plan, groups, started, done)
    (out / COLLECT_FILE).write_text(json.dumps({"host": plan.host, "collected": _now(), "written": done.written,
                                                "could_not_collect": done.missing, **done.facts}, indent=2) + "\n")
    return done


def _journal(plan: Plan, done: Collection) -> None:
    if shutil.which("journalctl") is None:
        done.could_not("journal", "journalctl not found")
        return
    argv = ["journalctl", "-o", "export", "--no-pager", "--since", plan.since]
    if plan.until:
        argv += ["--until", plan.until]
    if plan.journal is not None:
        argv += ["--directory" if plan.journal.is_dir() else "--file", str(plan.journal)]
    for unit in plan.units:
        argv += ["-u", unit]
    try:
        result = _run(argv, timeout=STEP_TIMEOUT_S * 4)
    except subprocess.TimeoutExpired:
        done.could_not("journal", f"journalctl took over {STEP_TIMEOUT_S * 4:.0f} s")
        return
    if result.returncode != 0 or not result.stdout:
        done.could_not("journal", result.stderr.decode(errors="replace").strip()[:300] or "no entries in the window")
        return
    path = plan.out / "journal" / f"{plan.host}.export"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(result.stdout)
    done.written.append(str(path.relative_to(plan.out)))


def _url(endpoint: str) -> tuple[str, str, int | None]:
    """(URL, host, port) of a metrics endpoint (see `endpoint_parts`)."""
    _, url, host, port = endpoint_parts(endpoint)
    return url, host, port


def _scrapes(plan: Plan, done: Collection) -> None:
    for endpoint in plan.endpoints:
        url, host, port = _url(endpoint)
        where = host if host not in ("localhost", "127.0.0.1", "::1") else plan.host
        path = plan.out / "metrics" / f"{where}_{port or 80}" / "scrapes.prom"
        path.parent.mkdir(parents=True, exist_ok=True)
        got = 0
        with open(path, "w") as scrapes:
            for n in range(plan.scrapes):
                if n:
                    time.sleep(plan.scrape_interval_s)
                at = _now()
                answer = fetch(url, deadline_s=STEP_TIMEOUT_S / 3)
                if isinstance(answer, Failure):
                    done.could_not(f"metrics {url}", f"scrape {n + 1}: {answer.why}")
                    continue
                body = answer.body.decode("utf-8", "replace")
                scrapes.write(f"# capture ts={at} host={where} port={port}\n{body}"
                              + ("" if body.endswith("\n") else "\n"))
                got += 1
        if got:
            done.written.append(str(path.relative_to(plan.out)))
        else:
            path.unlink()
            path.parent.rmdir()


def _title(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip() or None


def _unit_pids(unit: str) -> list[int]:
    """The processes in a systemd unit's cgroup (v2, or v1's systemd hierarchy)."""
    name = unit if "." in unit else f"{unit}.service"
    for base in ("/sys/fs/cgroup/system.slice", "/sys/fs/cgroup/systemd/system.slice"):
        procs = Path(base) / name / "cgroup.procs"
        if procs.is_file():
            return [int(p) for p in procs.read_text().split()]
    return []


def _processes(plan: Plan, done: Collection) -> dict[int, str | None]:
    """Every process to dump, with the engine (group) it belongs to when known."""
    from forensics.profiles import load_profile

    chosen: dict[int, str | None] = {}
    for group, pids in plan.pids.items():
        chosen.update({pid: group for pid in pids})
    profile = load_profile()
    for unit in plan.units:
        pids = _unit_pids(unit)
        if not pids:
            done.could_not(f"processes of {unit}", "no cgroup found for the unit (not running here?)")
        for pid in pids:
            chosen.setdefault(pid, profile.component_of(unit) or unit)
    patterns = [re.compile(p) for p in (plan.titles or default_titles())]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        title = _title(int(entry.name))
        if title and any(p.search(title) for p in patterns):
            chosen.setdefault(int(entry.name), profile.component_of(title))
    return chosen


def default_titles() -> list[str]:
    """The process-title patterns of every shipped profile (SGLang's schedulers, vLLM's engine core
    and workers): what is dumped when no title is given."""
    from forensics.profiles import available, load_profile

    return [load_profile(name).stacks.process_title.pattern for name in available()]


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


def _stacks(plan: Plan, groups: dict[int, str | None], done: Collection) -> None:
    if not groups:
        done.could_not("stacks", "no process matched the units, titles or pids given")
        return
    beside = Path(sys.executable).parent / "py-spy"  # installed in the same environment as forensics
    spy = shutil.which("py-spy") or (str(beside) if beside.is_file() else None)
    if spy is None:
        done.could_not("stacks", "py-spy not found (pip install py-spy)")
        return
    for number in range(1, plan.rounds + 1):
        if number > 1:
            time.sleep(plan.round_interval_s)
        parts = []
        for pid, group in sorted(groups.items()):
            title = (_title(pid) or "?").split()[0]
            header = (f"# capture ts={_now()} host={plan.host} pid={pid}" + (f" group={group}" if group else "")
                      + f" title={title}\n")
            argv = [spy, "dump", "--pid", str(pid)] + (["--native"] if plan.native else [])
            try:
                result = _run(argv)
                body = (result.stdout + (result.stderr if result.returncode else b"")).decode("utf-8", "replace")
            except subprocess.TimeoutExpired:
                body = f"Error: py-spy did not answer within {STEP_TIMEOUT_S:.0f} s\n"
            if body.startswith("Error:") or "\nError:" in body:
                done.could_not(f"stacks of pid {pid} (round {number})", body.strip().splitlines()[-1][:200])
            parts.append(header + body + ("" if body.endswith("\n") else "\n"))
        path = plan.out / "stacks" / f"round-{number}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(parts))
        done.written.append(str(path.relative_to(plan.out)))


def _units(plan: Plan, done: Collection) -> None:
    states = {}
    for unit in plan.units:
        try:
            result = _run(["systemctl", "show", unit, "--no-pager", "-p", "ActiveState,SubState,NRestarts,"
                           "ExecMainStartTimestamp,InvocationID,MainPID"])
        except (FileNotFoundError, subprocess.TimeoutExpired) as error:
            done.could_not(f"systemctl show {unit}", str(error))
            continue
        if result.returncode != 0:
            done.could_not(f"systemctl show {unit}", result.stderr.decode(errors="replace").strip()[:200])
            continue
        states[unit] = dict(line.split("=", 1) for line in result.stdout.decode().splitlines() if "=" in line)
        _save(plan, done, f"systemctl status {unit}", ["systemctl", "status", unit, "--no-pager", "-n", "0"],
              f"units/{unit}.status.txt", any_status=True)  # status exits 3 for a stopped unit
    if states:
        done.facts["units"] = states


def _save(plan: Plan, done: Collection, what: str, argv: list[str], relative: str, timeout: float = STEP_TIMEOUT_S,
          any_status: bool = False) -> bytes | None:
    """Run a read-only command and keep what it printed at `relative`; what failed is written down."""
    try:
        result = _run(argv, timeout=timeout)
    except FileNotFoundError:
        done.could_not(what, f"{argv[0]} not found")
        return None
    except subprocess.TimeoutExpired:
        done.could_not(what, f"{argv[0]} did not answer within {timeout:.0f} s (a wedged driver?)")
        return None
    if (result.returncode != 0 and not any_status) or not result.stdout:
        done.could_not(what, result.stderr.decode(errors="replace").strip()[:200] or f"{argv[0]} printed nothing")
        return None
    path = plan.out / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(result.stdout)
    done.written.append(relative)
    return result.stdout


def _gpus(plan: Plan, done: Collection) -> None:
    """The devices' own state: NVIDIA's `nvidia-smi -q` (and its processes), else Ascend's `npu-smi
    info`; a one-line summary of each NVIDIA GPU in collect.json."""
    if shutil.which("nvidia-smi") is not None:
        summary = _save(plan, done, "GPU state", ["nvidia-smi", "--query-gpu=index,uuid,utilization.gpu,memory.used,"
                                                  "power.draw,temperature.gpu", "--format=csv"], "gpu/nvidia-smi.csv")
        if summary is not None:
            done.facts["gpus"] = summary.decode(errors="replace")
        _save(plan, done, "GPU details (nvidia-smi -q)", ["nvidia-smi", "-q"], "gpu/nvidia-smi-q.txt")
        _save(plan, done, "GPU processes (nvidia-smi -q -d PIDS)", ["nvidia-smi", "-q", "-d", "PIDS"],
              "gpu/nvidia-smi-pids.txt")
    elif shutil.which("npu-smi") is not None:
        _save(plan, done, "NPU state (npu-smi info)", ["npu-smi", "info"], "gpu/npu-smi.txt")
    else:
        done.could_not("GPU state", "neither nvidia-smi nor npu-smi found")


def _kernel(plan: Plan, done: Collection) -> None:
    """The kernel's messages of the window (Xid, OOM killer, hung tasks): `journalctl -k`, else dmesg."""
    argv = ["journalctl", "-k", "-o", "export", "--no-pager", "--since", plan.since]
    if plan.until:
        argv += ["--until", plan.until]
    if plan.journal is not None:
        argv += ["--directory" if Path(plan.journal).is_dir() else "--file", str(plan.journal)]
    if shutil.which("journalctl") and _save(plan, done, "kernel messages (journalctl -k)", argv,
                                            f"journal/{plan.host}-kernel.export", STEP_TIMEOUT_S * 2):
        return
    _save(plan, done, "kernel messages (dmesg)", ["dmesg", "--time-format", "iso"], f"logs/{plan.host}/dmesg.log")


FR_VARIABLES = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
FR_DEFAULT_PREFIX = "/tmp/nccl_trace_rank_"  # torch's default when neither variable is set
FR_MAX_BYTES = 256 << 20  # one dump at most


def fr_prefixes(pids: list[int]) -> list[str]:
    """Where the processes' Flight Recorder dumps are written: the prefixes their environment names
    (read from /proc/PID/environ), else torch's default."""
    found = []
    for pid in pids:
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for entry in environ:
            name, _, value = entry.partition(b"=")
            if name.decode(errors="replace") in FR_VARIABLES and value:
                found.append(value.decode(errors="replace"))
    return sorted(set(found)) or [FR_DEFAULT_PREFIX]


def _flight_recorder(plan: Plan, groups: dict[int, str | None], done: Collection) -> None:
    """Flight Recorder dumps found where the processes' torch writes them, copied as they are."""
    done.facts["flight_recorder_prefixes"] = fr_prefixes(sorted(groups))
    if not copy_flight_recorder(plan, done):
        done.could_not("Flight Recorder dumps", "none found (looked for "
                       + ", ".join(p + "*" for p in done.facts["flight_recorder_prefixes"]) + ")")


def copy_flight_recorder(plan: Plan, done: Collection) -> int:
    """Copy the Flight Recorder dumps at the collection's prefixes that the bundle does not hold yet
    (a job writes them at its watchdog's timeout, so some appear after the stacks were taken);
    returns how many were copied now."""
    copied = 0
    for prefix in done.facts.get("flight_recorder_prefixes", [FR_DEFAULT_PREFIX]):
        folder, stem = Path(prefix).parent, Path(prefix).name
        try:
            candidates = sorted(p for p in folder.iterdir() if p.name.startswith(stem) and p.is_file()
                                and not p.is_symlink())
        except OSError:
            continue
        for path in candidates:
            target = plan.out / "flight_recorder" / plan.host / path.name
            if target.exists():
                continue
            if path.stat().st_size > FR_MAX_BYTES:
                if not any(m["what"] == f"Flight Recorder dump {path}" for m in done.missing):
                    done.could_not(f"Flight Recorder dump {path}", f"over {FR_MAX_BYTES:,} bytes: not copied")
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            done.written.append(str(target.relative_to(plan.out)))
            copied += 1
    return copied


def _clock(done: Collection) -> None:
    zone = None
    try:
        zone = Path("/etc/timezone").read_text().strip() if Path("/etc/timezone").is_file() else None
        if zone is None and Path("/etc/localtime").is_symlink():
            zone = str(Path("/etc/localtime").resolve()).split("zoneinfo/", 1)[-1]
    except OSError:
        pass
    done.facts["time_zone"] = zone or "UTC"
    offset = None
    if shutil.which("chronyc"):
        try:
            tracking = _run(["chronyc", "tracking"], timeout=5).stdout.decode()
            found = re.search(r"System time\s*:\s*([0-9.]+) seconds (fast|slow)", tracking)
            if found:
                offset = float(found[1]) * (1 if found[2] == "fast" else -1)
        except subprocess.TimeoutExpired:
            pass
    if offset is None:
        done.could_not("clock offset", "no chrony tracking to read it from (timesyncd does not report one)")
    else:
        done.facts["clock_offset_s"] = offset


def _incident(plan: Plan, groups: dict[int, str | None], started: datetime, done: Collection) -> None:
    from forensics.profiles import load_profile

    profile = load_profile()
    since = started - timedelta(hours=1) if plan.since == "-1h" else None
    window = (f'window = ["{since.isoformat(timespec="seconds")}", "{started.isoformat(timespec="seconds")}"]\n'
              if since else "")
    lines = [f'title = "incident on {plan.host} at {started:%Y-%m-%d %H:%M} UTC"  # TODO: say what happened',
             window.rstrip(), "", f'[hosts."{plan.host}"]', f'time_zone = "{done.facts.get("time_zone", "UTC")}"']
    if "clock_offset_s" in done.facts:
        lines.append(f"clock_offset_s = {done.facts['clock_offset_s']}")
    components: dict[str, dict[str, list[Any]]] = {}
    for unit in plan.units:
        name = profile.component_of(unit) or unit.removesuffix(".service")
        components.setdefault(name, {"units": [], "ports": []})["units"].append(unit if "." in unit else f"{unit}.service")
    for group in set(groups.values()):
        if group:
            components.setdefault(group, {"units": [], "ports": []})
    for endpoint in plan.endpoints:
        _, _, port = _url(endpoint)
        component = endpoint.split("=", 1)[0] if "=" in endpoint else profile.component_of(endpoint)
        if component and port:
            components.setdefault(component, {"units": [], "ports": []})["ports"].append(port)
    for name, parts in sorted(components.items()):
        lines += ["", f"[components.{json.dumps(name)}]", f"units = {json.dumps(parts['units'])}",
                  f"ports = {json.dumps(parts['ports'])}", f'stacks_group = {json.dumps(name)}']
    lines += ["", "# TODO: [[annotations]] at = \"…\" text = \"what people saw and did, and when\""]
    (plan.out / "incident.toml").write_text("\n".join(line for line in lines if line is not None) + "\n")
    done.written.append("incident.toml")


def sh_quote(value: str | int | float) -> str:
    """The one way a value enters the generated script: a single-quoted sh word (a `'` inside is
    closed, escaped and reopened), so no character of it is ever read by the shell."""
    text = value if isinstance(value, str) else f"{value:g}" if isinstance(value, float) else str(value)
    return "'" + text.replace("'", "'\\''") + "'"


def script(plan: Plan) -> str:
    """A POSIX `sh` script doing what `collect` does with `journalctl`, `curl`, `py-spy`, `tar`
    only, for a host where nothing can be installed; it writes the bundle as a tar stream to its
    standard output: `forensics collect --script … | ssh root@host sh > bundle.tar`. The plan is
    checked first (`plan_problems`) and every value in the text is quoted by `sh_quote`."""
    checked(plan, "collect --script")
    q = sh_quote
    units = " ".join(f"-u {q(u)}" for u in plan.units)
    journal = (f"--directory {q(str(plan.journal))}" if plan.journal and Path(plan.journal).is_dir()
               else f"--file {q(str(plan.journal))}" if plan.journal else "")
    until = f"--until {q(plan.until)}" if plan.until else ""
    titles = "|".join(plan.titles) or "sglang::|VLLM::|vllm"
    pids = " ".join(f"{group}={pid}" for group, members in plan.pids.items() for pid in members)
    endpoints = " ".join(q(f"{url} {port}") for _, url, _, port in map(endpoint_parts, plan.endpoints))
    native = " --native" if plan.native else ""
    return f"""#!/bin/sh
# Written by `forensics collect --script`: collects an incident bundle on this host, read-only,
# every step bounded in time, and writes it to standard output as a tar stream.
set -u
OUT=$(mktemp -d)
HOST=$(hostname)
now() {{ date -u +%Y-%m-%dT%H:%M:%S.000Z; }}
missing() {{ printf '%s\\t%s\\n' "$1" "$2" >> "$OUT/could-not-collect.tsv"; }}
mkdir -p "$OUT/journal" "$OUT/stacks"
if command -v journalctl >/dev/null 2>&1; then
  timeout 120 journalctl -o export --no-pager --since {q(plan.since)} {until} {journal} {units} \\
    > "$OUT/journal/$HOST.export" 2>"$OUT/journal.err" || missing journal "$(tail -n 1 "$OUT/journal.err")"
  [ -s "$OUT/journal/$HOST.export" ] || {{ rm -f "$OUT/journal/$HOST.export"; missing journal "no entries"; }}
  rm -f "$OUT/journal.err"
else
  missing journal "journalctl not found"
fi
SCRAPES={q(plan.scrapes)}
SCRAPE_INTERVAL={q(plan.scrape_interval_s)}
for endpoint in {endpoints}; do
  url=${{endpoint% *}}; port=${{endpoint##* }}
  dir="$OUT/metrics/${{HOST}}_$port"; mkdir -p "$dir"
  i=0
  while [ "$i" -lt "$SCRAPES" ]; do
    [ "$i" -gt 0 ] && sleep "$SCRAPE_INTERVAL"
    at=$(now)
    if body=$(curl -fsS --max-time 10 --max-filesize 67108864 --proto =http,https --max-redirs 0 -- "$url" 2>&1); then
      printf '# capture ts=%s host=%s port=%s\\n%s\\n' "$at" "$HOST" "$port" "$body" >> "$dir/scrapes.prom"
    else
      missing "metrics $url" "$body"
    fi
    i=$((i + 1))
  done
  [ -s "$dir/scrapes.prom" ] || rm -rf "$dir"
done
PIDS={q(pids)}  # GROUP=PID given outright, then =PID for every process whose title matches
for pid in $(pgrep -f -- {q(titles)} 2>/dev/null); do [ "$pid" = "$$" ] || PIDS="$PIDS =$pid"; done
ROUNDS={q(plan.rounds)}
ROUND_INTERVAL={q(plan.round_interval_s)}
START_AT={q(plan.start_at or 0)}  # every host of a fleet collection starts its rounds at this moment
now=$(date +%s)
[ "$now" -lt "$START_AT" ] && sleep $((START_AT - now))
printf '%s\\n' "$(date -u +%s.%N)" > "$OUT/rounds-started.txt"
if command -v py-spy >/dev/null 2>&1; then
  round=1
  while [ "$round" -le "$ROUNDS" ]; do
    [ "$round" -gt 1 ] && sleep "$ROUND_INTERVAL"
    for item in $PIDS; do
      group=${{item%%=*}}; pid=${{item#*=}}
      title=$(tr '\\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | cut -d' ' -f1)
      printf '# capture ts=%s host=%s pid=%s%s title=%s\\n' "$(now)" "$HOST" "$pid" \\
        "${{group:+ group=$group}}" "${{title:-?}}" >> "$OUT/stacks/round-$round.txt"
      timeout 30 py-spy dump --pid "$pid"{native} >> "$OUT/stacks/round-$round.txt" 2>&1 \\
        || missing "stacks of pid $pid" "py-spy failed (see the dump)"
    done
    round=$((round + 1))
  done
else
  missing stacks "py-spy not found"
fi
# the kernel's messages of the window (Xid, the OOM killer), else dmesg
if command -v journalctl >/dev/null 2>&1 && timeout 60 journalctl -k -o export --no-pager --since {q(plan.since)} \\
    {until} {journal} > "$OUT/journal/$HOST-kernel.export" 2>/dev/null && [ -s "$OUT/journal/$HOST-kernel.export" ]; then
  :
else
  rm -f "$OUT/journal/$HOST-kernel.export"
  mkdir -p "$OUT/logs/$HOST"
  timeout 30 dmesg --time-format iso > "$OUT/logs/$HOST/dmesg.log" 2>/dev/null || {{ rm -f "$OUT/logs/$HOST/dmesg.log"; missing "kernel messages" "neither journalctl -k nor dmesg could be read"; }}
fi
# the devices' own state
mkdir -p "$OUT/gpu"
if command -v nvidia-smi >/dev/null 2>&1; then
  timeout 30 nvidia-smi -q > "$OUT/gpu/nvidia-smi-q.txt" 2>&1 || missing "GPU details" "nvidia-smi -q failed or did not answer"
  timeout 30 nvidia-smi -q -d PIDS > "$OUT/gpu/nvidia-smi-pids.txt" 2>&1 || missing "GPU processes" "nvidia-smi -q -d PIDS failed"
elif command -v npu-smi >/dev/null 2>&1; then
  timeout 30 npu-smi info > "$OUT/gpu/npu-smi.txt" 2>&1 || missing "NPU state" "npu-smi info failed or did not answer"
else
  missing "GPU state" "neither nvidia-smi nor npu-smi found"
fi
# Flight Recorder dumps, where the dumped processes' torch writes them (else torch's default prefix)
mkdir -p "$OUT/flight_recorder/$HOST"
PREFIXES=""
for item in $PIDS; do
  pid=${{item#*=}}
  for prefix in $(tr '\\0' '\\n' < "/proc/$pid/environ" 2>/dev/null | sed -n 's/^TORCH_FR_DUMP_TEMP_FILE=//p; s/^TORCH_NCCL_DEBUG_INFO_TEMP_FILE=//p'); do
    PREFIXES="$PREFIXES $prefix"
  done
done
[ -n "$PREFIXES" ] || PREFIXES=/tmp/nccl_trace_rank_
found=0
for prefix in $PREFIXES; do
  for dump in "$prefix"*; do
    [ -f "$dump" ] && [ ! -L "$dump" ] || continue
    if [ "$(wc -c < "$dump")" -le {FR_MAX_BYTES} ]; then cp -- "$dump" "$OUT/flight_recorder/$HOST/" && found=1; fi
  done
done
[ "$found" = 1 ] || missing "Flight Recorder dumps" "none found under$PREFIXES"
# the units' own state, restart counters included
mkdir -p "$OUT/units"
UNITS={q(" ".join(plan.units))}  # unit names, checked: letters, digits and ":-_.\\@" only
for unit in $UNITS; do
  timeout 30 systemctl status "$unit" --no-pager -n 0 > "$OUT/units/$unit.status.txt" 2>&1
  timeout 30 systemctl show "$unit" --no-pager -p NRestarts,ActiveState,SubState,ExecMainStartTimestamp >> "$OUT/units/$unit.status.txt" 2>&1 \\
    || missing "systemctl show $unit" "systemctl failed"
done
tar -C "$OUT" -cf - .
rm -rf "$OUT"
"""
