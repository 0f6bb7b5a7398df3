"""`forensics watch OUT --follow-journal` / `--follow FILE`: capture at the first sign in the logs.

The first signs of most failures are not in `/metrics`: a `Watchdog caught collective operation
timeout` line, an `NVRM: Xid`, the OOM killer, a main process killed, a restart counter climbing.
This follows the journal (`journalctl -f` of the units and the kernel) or, where no journald runs,
a log file as it grows (`tail -F`), reads every new line with the layer profiles' line kinds
(`forensics/profiles/layers/`), and on the first line of a failure mode runs `collect` at once:
stacks first, while the ranks still live (a job's own abort handler kills them soon after its
watchdog fires), then the Flight Recorder files as they appear, waited for a bounded time.
"""

from __future__ import annotations

import functools
import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from forensics.capture.collect import Plan, collect, copy_flight_recorder
from forensics.profiles import load_profile

# the failure modes whose first line starts a capture
TRIGGERING = ("collective timeout", "device fault", "out of memory", "crash loop", "process ended", "kernel hang",
              "disk full")
RESTARTS = re.compile(r"restart counter is at (\d+)")


@dataclass
class Sign:
    """The line that started a capture, and what it is evidence of."""

    kind: str
    fault: str
    line: str
    seen: datetime


@dataclass
class SignWatch:
    """What to follow and what to capture."""

    collect: Plan  # its `out` is the folder bundles go under
    follow_file: Path | None = None  # a log file to follow; None: the journal
    units: list[str] = field(default_factory=list)
    restarts: int = 3  # a crash loop's restart counter from which it is a sign
    flight_recorder_wait_s: float = 30.0  # how long to wait for Flight Recorder dumps after the stacks
    once: bool = True
    log: Any = field(default=sys.stderr, repr=False)
    # Hosts to follow over ssh (each as `collect --host`): a sign on any of them captures every one
    hosts: list[tuple[str, Plan]] = field(default_factory=list)
    ssh_config: Path | None = None


@functools.cache
def _triggers() -> tuple[tuple[str, str, re.Pattern[str]], ...]:
    """(kind, failure mode, pattern) of the layers' line kinds that start a capture, compiled once:
    every followed line is read with them."""
    return tuple((e.kind, e.fault or "", re.compile(e.pattern)) for e in load_profile().logs.events
                 if e.layer is not None and e.fault in TRIGGERING)


def sign_of(line: str, restarts: int) -> tuple[str, str] | None:
    """(kind, failure mode) when `line` is the first sign of a failure, else None."""
    for kind, fault, pattern in _triggers():
        if not pattern.search(line):
            continue
        if kind == "crash_loop" and (found := RESTARTS.search(line)) and int(found[1]) < restarts:
            return None
        return kind, fault
    return None


def _file_lines(path: Path) -> Iterator[str]:
    """New lines of a file as it grows, as `tail -F` gives them: from its end when it exists, from
    its start when it appears after the following began."""
    existed = path.exists()
    while not path.exists():
        time.sleep(0.2)
        yield ""
    with open(path, errors="replace") as f:
        if existed:
            f.seek(0, 2)
        while True:
            line = f.readline()
            if not line:
                time.sleep(0.2)
                yield ""
                continue
            yield line.rstrip("\n")


def _journal_lines(units: list[str]) -> Iterator[str]:
    argv = ["journalctl", "-f", "-n", "0", "-o", "cat", "--no-pager", "-k"]
    for unit in units:
        argv += ["-u", unit]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, errors="replace") as follower:
        for line in follower.stdout:  # type: ignore[union-attr]
            yield line.rstrip("\n")


def _remote_lines(host: str, w: SignWatch, out: queue.Queue[tuple[str, str]], stop: threading.Event,
                  started: list[subprocess.Popen[str]]) -> None:
    """One host's new log lines over ssh (`tail -F` of the file, or `journalctl -f`), into `out`."""
    from forensics.capture.collect import sh_quote

    if w.follow_file:
        command = f"tail -n 0 -F {sh_quote(str(w.follow_file))}"
    else:
        command = "journalctl -f -n 0 -o cat --no-pager -k " + " ".join(f"-u {sh_quote(u)}" for u in w.units)
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=15"] + (["-F", str(w.ssh_config)] if w.ssh_config
                                                                         else []) + ["--", host, command]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, errors="replace") as ssh:
        started.append(ssh)
        for line in ssh.stdout:  # type: ignore[union-attr]
            if stop.is_set():
                break
            out.put((host, line.rstrip("\n")))


def follow_fleet(w: SignWatch) -> list[Path]:
    """Follow every host's logs over ssh; the first sign on any host collects every host at once."""
    from forensics.capture.fleet import collect_fleet

    lines: queue.Queue[tuple[str, str]] = queue.Queue()
    stop = threading.Event()
    started: list[subprocess.Popen[str]] = []
    for host, _ in w.hosts:
        threading.Thread(target=_remote_lines, args=(host, w, lines, stop, started), daemon=True).start()
    print(f"forensics watch: following {len(w.hosts)} hosts over ssh; a sign on any captures all", file=w.log,
          flush=True)
    captured = []
    try:
        while True:
            host, line = lines.get()
            found = sign_of(line, w.restarts)
            if found is None:
                continue
            seen = datetime.now(UTC)
            bundle = w.collect.out / f"{seen:%Y%m%dT%H%M%SZ}"
            print(f"forensics watch: {found[1]} ({found[0]}) on {host} at {seen:%H:%M:%S}: “{line[:160]}”; "
                  f"collecting every host into {bundle}", file=w.log, flush=True)
            collect_fleet(bundle, w.hosts, ssh_config=w.ssh_config, progress=False)
            (bundle / "sign.txt").write_text(f"{seen.isoformat()}\t{host}\t{found[0]}\t{found[1]}\t{line}\n")
            captured.append(bundle)
            if w.once:
                return captured
    finally:
        stop.set()
        for ssh in started:
            ssh.kill()


def follow(w: SignWatch) -> list[Path]:
    """Follow the logs until the first sign (or forever with `once=False`); returns the bundles."""
    if w.hosts:
        return follow_fleet(w)
    where = str(w.follow_file) if w.follow_file else "the journal (units and kernel)"
    print(f"forensics watch: following {where}; a capture starts at the first line of: {', '.join(TRIGGERING)}",
          file=w.log, flush=True)
    captured: list[Path] = []
    lines = _file_lines(w.follow_file) if w.follow_file else _journal_lines(w.units or w.collect.units)
    for line in lines:
        found = sign_of(line, w.restarts) if line else None
        if found is None:
            continue
        sign = Sign(found[0], found[1], line, datetime.now(UTC))
        captured.append(capture(sign, w))
        if w.once:
            break
    return captured


def capture(sign: Sign, w: SignWatch) -> Path:
    """Stacks at once, then the Flight Recorder dumps that appear within the wait."""
    bundle = w.collect.out / f"{sign.seen:%Y%m%dT%H%M%SZ}"
    print(f"forensics watch: {sign.fault} ({sign.kind}) at {sign.seen:%H:%M:%S}: “{sign.line[:160]}”; collecting "
          f"into {bundle}", file=w.log, flush=True)
    done = collect(replace(w.collect, out=bundle, rounds=max(2, w.collect.rounds)))
    (bundle / "sign.txt").write_text(f"{sign.seen.isoformat()}\t{sign.kind}\t{sign.fault}\t{sign.line}\n")
    stacks_at = datetime.now(UTC)
    end = time.monotonic() + w.flight_recorder_wait_s
    late = 0
    while time.monotonic() < end:
        late += copy_flight_recorder(replace(w.collect, out=bundle), done)
        time.sleep(0.5)
    print(f"forensics watch: stacks {(stacks_at - sign.seen).total_seconds():.1f} s after the sign; "
          f"{late} Flight Recorder dumps appeared while waiting {w.flight_recorder_wait_s:g} s", file=w.log, flush=True)
    return bundle
