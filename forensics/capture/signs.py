"""`forensics watch OUT --follow-journal` / `--follow FILE`: capture at the first sign in the logs.

The first signs of most failures are not in `/metrics`: a `Watchdog caught collective operation
timeout` line, an `NVRM: Xid`, the OOM killer, a main process killed, a restart counter climbing.
This follows the journal (`journalctl -f` of the units and the kernel) or, where no journald runs,
a log file as it grows (`tail -F`: on through its rotation, renamed and created anew or cut short),
reads every new line with the layer profiles' line kinds (`forensics/profiles/layers/`), and on the
first line of a failure mode runs `collect` at once: stacks first, while the ranks still live (a
job's own abort handler kills them soon after its watchdog fires), then the Flight Recorder files as
they appear, waited for a bounded time.

Every line is hostile input (a client's prompt, a model's output, whatever a process prints): only
its first `CHECKED_CHARS` characters are read for a sign, with patterns whose search takes time in
proportion to that (`tests/hostile/test_watcher.py`), and `sign.txt` shows its control characters
as `\\x1b`. With `once=False`, a sign of a kind captured less than `cooldown_s` ago starts no other
capture (one failure prints its line many times: one NCCL timeout, a line per rank), and no two
captures share a folder.
"""

from __future__ import annotations

import functools
import os
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
from typing import IO, Any

from forensics.capture.collect import collect, copy_flight_recorder
from forensics.capture.plan import Plan
from forensics.capture.watch import new_bundle
from forensics.profiles import load_profile
from forensics.render.text import terminal_safe

# the failure modes whose first line starts a capture
TRIGGERING = ("collective timeout", "device fault", "out of memory", "crash loop", "process ended", "kernel hang",
              "disk full")
RESTARTS = re.compile(r"restart counter is at (\d+)")

# How much of a line is read for a sign: its first 8 KiB (of characters). A failure's own words come
# early in its line (the layers' sample lines are under 400 characters, every profile's under 2,300),
# and a line of megabytes (a prompt, a model's output, written on purpose) made a pattern's search
# take seconds (1 MiB of `Received a dump signal `: 46 s): cut, a line costs the same whatever its
# length. A cut line says so in the log and in `sign.txt`.
CHECKED_CHARS = 8 << 10
# What the file and pipe readers keep of one line: enough bytes for CHECKED_CHARS characters of any
# UTF-8 (4 bytes each) and one more, so that a cut line is known to be one; the rest of the line is
# read and dropped, never held whole (a line of gigabytes with no newline).
LINE_KEPT_BYTES = 4 * CHECKED_CHARS + 4
FOLLOW_POLL_S = 0.2  # how often a followed file is looked at for new lines, a new file at its path, a cut
# A line its writer left with no newline is read after this many polls with nothing more (a
# process that died mid-line); one still being written gets the rest of it first.
PARTIAL_LINE_POLLS = 5
# How long after a capture a sign of the same kind starts no other: the lines of one failure come
# within minutes (a collective timeout: one per rank, then per process group), and the same kind
# later is a new failure worth its own capture. Each capture is a full collection (the journal,
# stacks, Flight Recorder dumps): one per line would load the failing host and fill its disk.
COOLDOWN_S = 600.0
SHOWN_CHARS = 160  # of a line in the watcher's own log


@dataclass
class Sign:
    """The line that started a capture, and what it is evidence of."""

    kind: str
    fault: str
    line: str  # as read (a long one cut by the reader); only its first CHECKED_CHARS are checked
    seen: datetime


def _cut(line: str) -> bool:
    """Whether `line` is longer than what is checked of it (and so was cut)."""
    return len(line) > CHECKED_CHARS


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
    cooldown_s: float = COOLDOWN_S  # after a capture, how long a sign of its kind starts no other
    # Set from another thread to end the following (at the next line, or the file's next poll)
    stop: threading.Event | None = field(default=None, repr=False)


@functools.cache
def _triggers() -> tuple[tuple[str, str, bool, re.Pattern[str]], ...]:
    """(kind, failure mode, whether it starts a capture, pattern) of every layer line kind, in the
    profile's order, compiled once: every followed line is read with them."""
    return tuple((e.kind, e.fault or "", e.fault in TRIGGERING, re.compile(e.pattern))
                 for e in load_profile().logs.events if e.layer is not None)


def sign_of(line: str, restarts: int) -> tuple[str, str] | None:
    """(kind, failure mode) when `line` is the first sign of a failure, else None. A line is the
    kind the readers would make it (the first layer kind that matches: a non-fatal Xid is not a
    device fault), and only kinds of a triggering failure mode start a capture. Only the line's
    first CHECKED_CHARS characters are read."""
    line = line[:CHECKED_CHARS]
    for kind, fault, triggering, pattern in _triggers():
        if not pattern.search(line):
            continue
        if not triggering:
            return None
        if kind == "crash_loop" and (found := RESTARTS.search(line)) and int(found[1]) < restarts:
            return None
        return kind, fault
    return None


_COLUMN_BREAKS = {0x09: "\\x09", 0x0A: "\\x0a"}  # what would break `sign.txt`'s columns and lines


def _visible(text: str) -> str:
    """`text` with every control character written out as `\\xNN`: the ones a terminal acts on (an
    escape sequence in a log line can clear the screen, set the window's title or write the
    clipboard when `sign.txt` is shown), and the tab and newline that would break its columns."""
    return terminal_safe(text).translate(_COLUMN_BREAKS)


def _shown(line: str) -> str:
    """The line for the watcher's log: its start, visible, and whether it was cut."""
    cut = f" (a line of more than {CHECKED_CHARS:,} characters: only its first {CHECKED_CHARS:,} checked)"
    return f"“{_visible(line[:SHOWN_CHARS])}”" + (cut if _cut(line) else "")


def _sign_text(line: str) -> str:
    """The line's column in `sign.txt`: what was checked of it, visible, and a word when it was cut."""
    cut = f" [cut: a line of more than {CHECKED_CHARS:,} characters, only these first ones checked]"
    return _visible(line[:CHECKED_CHARS]) + (cut if _cut(line) else "")


def _replaced_or_cut(path: Path, f: IO[bytes]) -> str | None:
    """Whether the file read through `f` is no longer the one at `path` ("replaced": renamed away
    and created anew, as logrotate does) or is shorter than what was read of it ("cut": logrotate's
    `copytruncate`); None when neither, or when nothing is at the path yet (its writer may still
    write to the renamed file until it opens the new one)."""
    try:
        now = os.stat(path)
    except OSError:
        return None
    held = os.fstat(f.fileno())
    if (now.st_ino, now.st_dev) != (held.st_ino, held.st_dev):
        return "replaced"
    return "cut" if held.st_size < f.tell() else None


def _file_lines(path: Path, log: Any = None, poll_s: float = FOLLOW_POLL_S) -> Iterator[str]:
    """New lines of a file as it grows, as `tail -F` gives them: from its end when it exists, from
    its start when it appears after the following began; from the start of the new file when it is
    renamed away and created anew, and from the start again when it is cut short. A line is given
    once its newline is written (a half-written line waits PARTIAL_LINE_POLLS for the rest), at most
    LINE_KEPT_BYTES of it. Gives "" at each poll that found nothing new; says in `log` when it
    follows a new file or starts again."""
    from_end = path.exists()
    f: IO[bytes] | None = None
    kept = bytearray()  # the line being read: its first LINE_KEPT_BYTES
    idle = 0  # polls since the last new byte
    try:
        while True:
            if f is None:
                try:
                    f = open(path, "rb")  # noqa: SIM115 - held across yields, closed below
                except OSError:  # not there yet, or between its rename and the new file
                    yield ""
                    time.sleep(poll_s)
                    continue
                if from_end:
                    f.seek(0, os.SEEK_END)
                    from_end = False
            chunk = f.readline(1 << 16)
            if chunk:
                idle = 0
                ends = chunk.endswith(b"\n")
                kept += chunk[:max(0, LINE_KEPT_BYTES - len(kept))].rstrip(b"\n")
                if ends:
                    yield kept.decode("utf-8", "replace")
                    kept.clear()
                continue
            change = _replaced_or_cut(path, f)
            if change is None:
                idle += 1
                if kept and idle >= PARTIAL_LINE_POLLS:
                    yield kept.decode("utf-8", "replace")
                    kept.clear()
                yield ""
                time.sleep(poll_s)
                continue
            if kept:  # the last line of the old text, never ended: read as it is
                yield kept.decode("utf-8", "replace")
                kept.clear()
            if log is not None:
                print(f"forensics watch: {_visible(str(path))} was " + ("renamed and created anew (rotated): following "
                      "the new file" if change == "replaced" else "cut short (rotated by copytruncate): reading it "
                      "again") + " from its start", file=log, flush=True)
            if change == "replaced":
                f.close()
                f = None
            else:
                f.seek(0)
    finally:
        if f is not None:
            f.close()


def _pipe_lines(stream: IO[bytes]) -> Iterator[str]:
    """A pipe's lines, decoded, each cut to LINE_KEPT_BYTES (the rest of a longer line read and
    dropped, never held)."""
    while line := stream.readline(LINE_KEPT_BYTES):
        rest = line
        while rest and not rest.endswith(b"\n"):
            rest = stream.readline(1 << 16)
        yield line.rstrip(b"\n").decode("utf-8", "replace")


def _journal_lines(units: list[str]) -> Iterator[str]:
    argv = ["journalctl", "-f", "-n", "0", "-o", "cat", "--no-pager", "-k"]
    for unit in units:
        argv += ["-u", unit]
    with subprocess.Popen(argv, stdout=subprocess.PIPE) as follower:
        try:
            yield from _pipe_lines(follower.stdout)  # type: ignore[arg-type]
        finally:  # ended early (a capture with once, a stop): `journalctl -f` would wait for a line
            follower.kill()


def _remote_lines(host: str, w: SignWatch, out: queue.Queue[tuple[str, str]], stop: threading.Event,
                  started: list[subprocess.Popen[bytes]]) -> None:
    """One host's new log lines over ssh (`tail -F` of the file, or `journalctl -f`), into `out`."""
    from forensics.capture.sh_script import sh_quote

    if w.follow_file:
        command = f"tail -n 0 -F {sh_quote(str(w.follow_file))}"
    else:
        command = "journalctl -f -n 0 -o cat --no-pager -k " + " ".join(f"-u {sh_quote(u)}" for u in w.units)
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=15"] + (["-F", str(w.ssh_config)] if w.ssh_config
                                                                         else []) + ["--", host, command]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as ssh:
        started.append(ssh)
        for line in _pipe_lines(ssh.stdout):  # type: ignore[arg-type]
            if stop.is_set():
                break
            out.put((host, line))


class _Cooldown:
    """The kinds of sign captured less than `seconds` ago, which start no other capture: one failure
    prints its line many times, and one capture holds its evidence. The first sign held back after a
    capture is said in the log, the others counted and said with the kind's next capture."""

    def __init__(self, seconds: float, log: Any) -> None:
        self.seconds = seconds
        self.log = log
        self._last: dict[str, tuple[float, Path]] = {}  # kind -> (when it was captured, monotonic; where)
        self._held: dict[str, int] = {}  # kind -> signs held back since its last capture

    def holds(self, sign: Sign, where: str = "") -> bool:
        """Whether `sign` starts no capture, its kind captured within the cooldown."""
        last = self._last.get(sign.kind)
        if last is None or time.monotonic() - last[0] >= self.seconds:
            return False
        self._held[sign.kind] = self._held.get(sign.kind, 0) + 1
        if self._held[sign.kind] == 1:
            print(f"forensics watch: {sign.fault} ({sign.kind}){where} again at {sign.seen:%H:%M:%S}: "
                  f"{_shown(sign.line)}; not captured: this kind was captured into {last[1]} "
                  f"{time.monotonic() - last[0]:.0f} s ago (cooldown {self.seconds:g} s; more of it within the "
                  "cooldown are counted, not said)", file=self.log, flush=True)
        return True

    def captured(self, kind: str, bundle: Path) -> str:
        """Note a capture of `kind` into `bundle` (its cooldown starts); words on the signs of that kind
        held back in the last cooldown, for the capture's log line."""
        self._last[kind] = (time.monotonic(), bundle)
        held = self._held.pop(kind, 0)
        return f" ({held} signs of this kind were held back in the cooldown of its last capture)" if held else ""


def follow_fleet(w: SignWatch) -> list[Path]:
    """Follow every host's logs over ssh; the first sign on any host collects every host at once."""
    from forensics.capture.fleet import collect_fleet

    lines: queue.Queue[tuple[str, str]] = queue.Queue()
    ended = threading.Event()
    started: list[subprocess.Popen[bytes]] = []
    for host, _ in w.hosts:
        threading.Thread(target=_remote_lines, args=(host, w, lines, ended, started), daemon=True).start()
    print(f"forensics watch: following {len(w.hosts)} hosts over ssh; a sign on any captures all", file=w.log,
          flush=True)
    captured = []
    cooldown = _Cooldown(w.cooldown_s, w.log)
    try:
        while w.stop is None or not w.stop.is_set():
            try:
                host, line = lines.get(timeout=FOLLOW_POLL_S)
            except queue.Empty:
                continue
            found = sign_of(line, w.restarts)
            if found is None:
                continue
            sign = Sign(found[0], found[1], line, datetime.now(UTC))
            if cooldown.holds(sign, f" on {host}"):
                continue
            bundle = new_bundle(w.collect.out, sign.seen)
            print(f"forensics watch: {sign.fault} ({sign.kind}) on {host} at {sign.seen:%H:%M:%S}: "
                  f"{_shown(line)}; collecting every host into {bundle}", file=w.log, flush=True)
            collect_fleet(bundle, w.hosts, ssh_config=w.ssh_config, progress=False)
            (bundle / "sign.txt").write_text(f"{sign.seen.isoformat()}\t{_visible(host)}\t{sign.kind}\t{sign.fault}\t"
                                             f"{_sign_text(line)}\n")
            captured.append(bundle)
            if held := cooldown.captured(sign.kind, bundle):
                print(f"forensics watch: captured {bundle}{held}", file=w.log, flush=True)
            if w.once:
                return captured
        return captured
    finally:
        ended.set()
        for ssh in started:
            ssh.kill()


def follow(w: SignWatch) -> list[Path]:
    """Follow the logs until the first sign (or forever with `once=False`, until `w.stop` is set);
    returns the bundles."""
    if w.hosts:
        return follow_fleet(w)
    where = str(w.follow_file) if w.follow_file else "the journal (units and kernel)"
    print(f"forensics watch: following {where}; a capture starts at the first line of: {', '.join(TRIGGERING)}",
          file=w.log, flush=True)
    captured: list[Path] = []
    cooldown = _Cooldown(w.cooldown_s, w.log)
    lines = _file_lines(w.follow_file, w.log) if w.follow_file else _journal_lines(w.units or w.collect.units)
    try:
        for line in lines:
            if w.stop is not None and w.stop.is_set():
                break
            found = sign_of(line, w.restarts) if line else None
            if found is None:
                continue
            sign = Sign(found[0], found[1], line, datetime.now(UTC))
            if cooldown.holds(sign):
                continue
            bundle = capture(sign, w)
            captured.append(bundle)
            if held := cooldown.captured(sign.kind, bundle):
                print(f"forensics watch: captured {bundle}{held}", file=w.log, flush=True)
            if w.once:
                break
    finally:
        lines.close()  # the file closed, `journalctl -f` ended
    return captured


def capture(sign: Sign, w: SignWatch) -> Path:
    """Stacks at once, then the Flight Recorder dumps that appear within the wait; into a folder of
    its own under the plan's `out`, whatever was captured there before."""
    bundle = new_bundle(w.collect.out, sign.seen)
    print(f"forensics watch: {sign.fault} ({sign.kind}) at {sign.seen:%H:%M:%S}: {_shown(sign.line)}; collecting "
          f"into {bundle}", file=w.log, flush=True)
    done = collect(replace(w.collect, out=bundle, rounds=max(2, w.collect.rounds)))
    (bundle / "sign.txt").write_text(f"{sign.seen.isoformat()}\t{sign.kind}\t{sign.fault}\t{_sign_text(sign.line)}\n")
    stacks_at = datetime.now(UTC)
    end = time.monotonic() + w.flight_recorder_wait_s
    late = 0
    while time.monotonic() < end:
        late += copy_flight_recorder(replace(w.collect, out=bundle), done)
        time.sleep(0.5)
    print(f"forensics watch: stacks {(stacks_at - sign.seen).total_seconds():.1f} s after the sign; "
          f"{late} Flight Recorder dumps appeared while waiting {w.flight_recorder_wait_s:g} s", file=w.log, flush=True)
    return bundle
