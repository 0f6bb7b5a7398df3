"""`forensics collect OUT --host H [--host H …]` or `--inventory hosts.toml`: the collector's read-only
script on many hosts at once over ssh, each host's bundle streamed into `OUT/<host>/`.

Each host runs the same script `collect --script` prints (`ssh HOST sh`: nothing is installed there;
an ssh destination as ssh understands it, so `~/.ssh/config` names, ports and jump hosts work, or
`--ssh-config FILE`). The hosts run in parallel, at most `concurrency` at a time, each within its
deadline: an unreachable host, a refused key or an expired deadline is a "could not collect" row of
its own in `OUT/fleet.json`, never a hang. Their stack rounds start at one shared moment (a start
time a few seconds ahead, passed to every script), so that a desync across nodes is seen in stacks
of the same minute; each host writes when its rounds began, and `fleet.json` keeps that beside the
local clock (the skew between hosts, as measured, with its bound: ssh's own latency).

An inventory is TOML: `[defaults]` with any of the collector's keys, then `[[host]]` tables, each
with `name` (the ssh destination) and its own keys (units, endpoints, titles, pids, …); checked as
the collector's own TOML is, every problem named with its path.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import threading
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from forensics.capture.plan import CollectError, Plan, plan_problems
from forensics.capture.sh_script import script
from forensics.case.unpack import Damaged, DeadlineReached, Unpacker, untar

FLEET_FILE = "fleet.json"
LEAD_S = 5  # the shared start is this far ahead of the launch: time for every host to connect
DEADLINE_S = 300.0
CONCURRENCY = 8
SAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]+")
RESERVED_NAMES = {FLEET_FILE}  # what collect writes beside the hosts' folders
INVENTORY_KEYS = {f for f in Plan.__dataclass_fields__ if f not in ("out", "start_at", "host")}


@dataclass
class HostResult:
    """What one host gave: its folder, files, and why it could not be collected, if so."""

    host: str
    folder: Path
    status: str = "pending"  # collected, failed
    why: str | None = None
    seconds: float = 0.0
    files: int = 0
    bytes: int = 0
    rounds_started: float | None = None  # the host's own clock when its stack rounds began
    refused: list[dict[str, str]] = field(default_factory=list)  # members of its stream not written, and why
    launched: float = field(default=0.0, repr=False)

    def as_dict(self, start_at: int) -> dict[str, Any]:
        """What fleet.json keeps of the host."""
        lag = None if self.rounds_started is None else round(self.rounds_started - start_at, 3)
        return {"host": self.host, "folder": self.folder.name, "status": self.status, "could_not_collect": self.why,
                "seconds": round(self.seconds, 2), "files": self.files, "bytes": self.bytes,
                "rounds_started": self.rounds_started, "rounds_started_minus_shared_start_s": lag,
                "refused_members": self.refused}


def folder_name(host: str) -> str:
    """A host's folder under OUT: its ssh destination with anything but letters, digits, `_.-` made
    `_`; never starting with `-` (an option to the next tool) and never a name collect writes itself."""
    name = SAFE_NAME.sub("_", host).strip("._-") or "host"
    return f"host-{name}" if name in RESERVED_NAMES else name


def load_inventory(path: Path, out: Path) -> list[tuple[str, Plan]]:
    """(destination, plan) per host of an inventory file; every problem named with its path."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise CollectError(f"{path}: {error}") from None
    problems = [f"{key}: unknown key (known: defaults, host)" for key in sorted(set(data) - {"defaults", "host"})]
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        problems.append("defaults: expected a table")
        defaults = {}
    hosts = data.get("host", [])
    if not isinstance(hosts, list) or not hosts:
        problems.append("host: expected one [[host]] table or more, each with a name")
        hosts = []
    out_plans = []
    for n, table in enumerate(hosts):
        where = f"host[{n}]"
        if not isinstance(table, dict) or not isinstance(table.get("name"), str) or not table["name"].strip():
            problems.append(f"{where}.name: expected the host's ssh destination")
            continue
        unknown = sorted(set(table) - INVENTORY_KEYS - {"name"}) + sorted(set(defaults) - INVENTORY_KEYS)
        problems += [f"{where}.{key}: unknown key (known: name, {', '.join(sorted(INVENTORY_KEYS))})" for key in unknown]
        values = {k: v for k, v in {**defaults, **table}.items() if k in INVENTORY_KEYS}
        plan = Plan(out / folder_name(table["name"]), **values)
        if isinstance(plan.journal, str):
            plan.journal = Path(plan.journal)
        problems += [f"{where}.{p}" for p in plan_problems(plan)]
        out_plans.append((table["name"], plan))
    if problems:
        raise CollectError(f"{path}: {len(problems)} problem{'s' if len(problems) > 1 else ''}: " + "; ".join(problems))
    return out_plans


def _ssh_argv(host: str, ssh_config: Path | None) -> list[str]:
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=15"]
    if ssh_config is not None:
        argv += ["-F", str(ssh_config)]
    return [*argv, "--", host, "sh"]


def _collect_one(host: str, plan: Plan, result: HostResult, deadline_s: float, ssh_config: Path | None,
                 on_bytes: Any) -> None:
    """Run the script on `host`, its tar stream unpacked into the host's folder as it arrives."""
    result.launched = time.time()
    result.folder.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(_ssh_argv(host, ssh_config), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    expired = threading.Event()

    def kill() -> None:
        expired.set()
        process.kill()

    timer = threading.Timer(deadline_s, kill)
    timer.start()
    errors: list[bytes] = []
    reader = threading.Thread(target=lambda: errors.append(process.stderr.read(65536)), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        process.stdin.write(script(plan).encode())  # type: ignore[union-attr]
        process.stdin.close()  # type: ignore[union-attr]
    except OSError:
        pass  # ssh ended before reading it (unreachable): its exit status says why
    # The stream is our own script's tar of files and folders: any link, device or name leading out
    # in it is an attack (a compromised host), refused and named; the host's other files are kept.
    unpacker = Unpacker(result.folder, what="the host's stream", deadline=time.monotonic() + deadline_s,
                        on_file=on_bytes)
    try:
        with unpacker:
            untar(process.stdout, unpacker)  # type: ignore[arg-type]
    except DeadlineReached:
        kill()
    except Damaged as error:
        if not expired.is_set() and process.poll() in (None, 0):
            result.why = f"the host's tar stream broke off: {error}"
    if unpacker.stopped:
        process.kill()  # it would wait for ever on a pipe nobody reads
        result.why = unpacker.stopped
    result.files, result.bytes, result.refused = unpacker.files, unpacker.bytes, unpacker.listing(stop=False)
    process.wait()
    timer.cancel()
    reader.join(timeout=5)
    result.seconds = time.time() - result.launched
    said = (errors[0] if errors else b"").decode(errors="replace").strip().splitlines()
    if expired.is_set():
        result.status, result.why = "failed", f"no whole answer within the deadline ({deadline_s:.0f} s): ended"
    elif process.returncode == 255:
        result.status, result.why = "failed", f"ssh failed: {said[-1] if said else 'exit status 255'}"[:300]
    elif process.returncode != 0 or result.why:
        result.status = "failed"
        result.why = result.why or f"the script ended with status {process.returncode}: {said[-1] if said else ''}"[:300]
    else:
        result.status = "collected"
    started = result.folder / "rounds-started.txt"
    if started.is_file():
        try:
            with open(started, "rb") as said:
                said_started = float(said.read(64).decode(errors="replace").split()[0])
        except (ValueError, IndexError, OSError):
            said_started = math.nan
        # the host's own word: a number only where it is a finite time (NaN or inf is no time)
        result.rounds_started = said_started if math.isfinite(said_started) else None


def collect_fleet(out: Path, hosts: list[tuple[str, Plan]], *, concurrency: int = CONCURRENCY,
                  deadline_s: float = DEADLINE_S, ssh_config: Path | None = None, progress: bool = True
                  ) -> list[HostResult]:
    """Collect every host into `out/<host>/` in parallel; `out/fleet.json` says what each gave."""
    if out.exists() and any(out.iterdir()):
        raise CollectError(f"{out}: exists and is not empty; collect writes a new bundle")
    names = [folder_name(h) for h, _ in hosts]
    if len(set(names)) != len(names):
        raise CollectError(f"two hosts would share a folder: {', '.join(sorted(n for n in names if names.count(n) > 1))}")
    out.mkdir(parents=True, exist_ok=True)
    start_at = int(time.time()) + LEAD_S
    results = [HostResult(host, out / name) for (host, _), name in zip(hosts, names, strict=True)]
    bars = _bars(results) if progress else {}
    with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(hosts)))) as pool:
        futures = [pool.submit(_collect_one, host, replace(plan, out=result.folder, start_at=start_at), result,
                               deadline_s, ssh_config, bars[host].update if host in bars else (lambda n: None))
                   for (host, plan), result in zip(hosts, results, strict=True)]
        for future, result in zip(futures, results, strict=True):
            try:
                future.result()
            except Exception as error:  # noqa: BLE001 - one host's failure is a row, never the run's end
                result.status, result.why = "failed", f"{type(error).__name__}: {error}"[:300]
            if result.host in bars:
                bars[result.host].set_postfix_str(result.status if result.why is None else f"failed: {result.why}"[:60])
                bars[result.host].close()
    record = {"collected": datetime.now(UTC).isoformat(), "shared_start": datetime.fromtimestamp(start_at, UTC)
              .isoformat(), "skew_note": "rounds_started_minus_shared_start_s: how late each host began its stack "
              "rounds by its own clock; the hosts' clocks differ by at most that spread plus ssh's latency",
              "hosts": [r.as_dict(start_at) for r in results]}
    (out / FLEET_FILE).write_text(json.dumps(record, indent=2) + "\n")
    return results


def _bars(results: list[HostResult]) -> dict[str, Any]:
    from tqdm import tqdm

    return {r.host: tqdm(desc=r.host, unit="B", unit_scale=True, position=n, leave=True)
            for n, r in enumerate(results)}
