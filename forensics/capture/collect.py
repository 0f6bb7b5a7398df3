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
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from forensics.capture.http import Failure, fetch
from forensics.capture.plan import CollectError, Plan, checked, endpoint_parts

STEP_TIMEOUT_S = 30.0  # no step of a collection may take longer
COLLECT_FILE = "collect.json"


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


def journal_option(journal: Path) -> list[str]:
    """journalctl's options reading `journal` instead of the running journald: `--directory` for a
    folder, else `--file=` with the pattern characters of its name escaped — journalctl expands a
    glob there, so `sys[1].journal` would read `sys1.journal` instead."""
    if journal.is_dir():
        return ["--directory", str(journal)]
    # imported here: the readers bring polars, 0.2 s a collector run without --journal need not pay
    from forensics.sources.journal.journal_native import file_argument

    return [file_argument(journal)]


def _journal(plan: Plan, done: Collection) -> None:
    if shutil.which("journalctl") is None:
        done.could_not("journal", "journalctl not found")
        return
    argv = ["journalctl", "-o", "export", "--no-pager", "--since", plan.since]
    if plan.until:
        argv += ["--until", plan.until]
    if plan.journal is not None:
        argv += journal_option(Path(plan.journal))
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
        argv += journal_option(Path(plan.journal))
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
