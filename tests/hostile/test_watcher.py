"""`forensics watch --follow/--forever` against hostile log lines and hostile log handling: a line of
one failure text repeated (each pattern's search must take time in proportion to the line, not its
square), a log rotated under the watcher (renamed and created anew, or cut short by `copytruncate`),
a burst of failure lines in one second (one capture, in a folder of its own), and escape sequences
in the line that started a capture."""

from __future__ import annotations

import io
import os
import re
import re._parser as sre_parse  # the patterns' literal texts, as the regex engine reads them
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import pytest

from forensics.capture.plan import Plan
from forensics.capture.signs import (
    CHECKED_CHARS,
    Sign,
    SignWatch,
    capture,
    follow,
    sign_of,
)
from forensics.capture.watch import new_bundle
from forensics.profiles import available, layers, load_profile

# Hostile line lengths, the second 4× the first: enough to tell linear from quadratic, and short
# enough that a cubic pattern (SGLang's markup leak was one: ~2 min a search at 64 KiB) fails the
# test in seconds.
SMALL, LARGE = 4 << 10, 16 << 10
# Growth of the search time from SMALL to LARGE: linear is 4, quadratic 16, cubic 64; well under
# quadratic, with room for a loaded machine's noise.
MOST_GROWTH = 8.0
ROUNDS = 3  # each time is the least of this many: noise only ever adds
WAIT_S = 10.0  # the most a follow test waits for the watcher (it takes well under a second)

TIMEOUT_LINE = ("[rank{r}]:[E710 18:00:32.421616045 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective "
                "operation timeout: WorkNCCL(SeqNum=59958, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                "Timeout(ms)=1800000) ran for 1800077 milliseconds before timing out.")
XID_LINE = "NVRM: Xid (PCI:0000:3b:00): 79, pid=2155, name=python3, GPU has fallen off the bus."


# --- 1. every line kind's pattern searches in time linear in the line ---------------------------------

def _line_kinds() -> dict[str, tuple[str, tuple[str, ...]]]:
    """pattern -> (where it comes from, the sample lines of its file), for every line kind of every
    shipped profile and layer, as the package loads them."""
    samples = {layer.name: tuple(s.line for s in layer.samples) for layer in layers()}
    kinds: dict[str, tuple[str, tuple[str, ...]]] = {}
    for name in available():
        profile = load_profile(name)
        for event in profile.logs.events:
            where = f"{event.layer or name}: {event.kind}"
            own = samples[event.layer] if event.layer else tuple(s.line for s in profile.logs.samples)
            kinds.setdefault(event.pattern, (where, own))
    for layer in layers():
        for event in layer.events:
            kinds.setdefault(event.pattern, (f"{layer.name}: {event.kind}", samples[layer.name]))
    return kinds


def _literal_runs(items: sre_parse.SubPattern | list) -> Iterator[list[str]]:
    """Each branch's texts, in order, that the pattern must find literally (its fixed words)."""
    runs: list[str] = []
    text = ""
    for op, arg in items:
        if op is sre_parse.LITERAL:
            text += chr(arg)
            continue
        runs += [text] if text else []
        text = ""
        if op is sre_parse.SUBPATTERN:
            for inner in _literal_runs(arg[3]):
                runs += inner
        elif op is sre_parse.BRANCH:
            for branch in arg[1]:
                yield from _literal_runs(branch)
    yield runs + ([text] if text else [])


def _hostile_lines(pattern: str, samples: tuple[str, ...], length: int) -> list[str]:
    """Lines of `length` made of one text repeated: each of the pattern's fixed texts, the first
    ones of a branch joined (with and without spaces), each sample line, and plain letters, spaces
    and digits. A `.*` or `[^)]*` after a text makes the search of such a line try it to the line's
    end from every repeat: time growing with the square of the length."""
    seeds = {"a", " ", "0", "x ", "0 "} | {s + " " for s in samples}
    for runs in _literal_runs(sre_parse.parse(pattern)):
        seeds.update(runs)
        for n in range(2, len(runs) + 1):
            seeds.update(("".join(runs[:n]), " ".join(runs[:n]) + " "))
    return [(seed * (length // len(seed) + 1))[:length] for seed in sorted(seeds) if seed]


def _cpu_time(run: Callable[[], object]) -> float:
    """The CPU time `run` takes (this thread's: the time other processes hold the CPU is not counted,
    which on a loaded machine made a linear search look ×40 slower)."""
    started = time.thread_time()
    run()
    return time.thread_time() - started


def _growth(search: Callable[[str], object], short: str, long: str) -> float:
    """How much longer `search` takes on `long` than on `short`, each the least of ROUNDS timings,
    taken in turn."""
    small = large = float("inf")
    for _ in range(ROUNDS):
        small = min(small, _cpu_time(partial(search, short)))
        large = min(large, _cpu_time(partial(search, long)))
    return large / max(small, 1e-9)


def test_every_line_kind_searches_a_hostile_line_in_linear_time() -> None:
    """Each pattern against lines of its own texts repeated, at two lengths: the time may grow with
    the length, never with its square (before the rewrite: `NVRM: Xid \\(PCI:[^)]*\\)`, `Received a
    dump signal .*from rank` and four others ×12-19, SGLang's markup leak ×46, with the cube). A line
    over the bound is timed again, twice at most (noise only ever adds: a pattern that grows with the
    square stays over it); one line over it is enough to name the pattern."""
    slow = []
    for pattern, (where, samples) in _line_kinds().items():
        search = re.compile(pattern).search
        for short, long in zip(_hostile_lines(pattern, samples, SMALL), _hostile_lines(pattern, samples, LARGE),
                               strict=True):
            search(short)  # once before timing: caches warm
            growth = _growth(search, short, long)
            for _ in range(2):
                if growth < MOST_GROWTH:
                    break
                growth = min(growth, _growth(search, short, long))
            if growth >= MOST_GROWTH:
                slow.append(f"{where}: ×{growth:.0f} on {short[:40]!r}… ({pattern})")
                break
    assert not slow, "searches that grow faster than the line:\n" + "\n".join(slow)


def test_a_line_is_checked_for_a_sign_only_to_its_cap() -> None:
    """A line of `Received a dump signal ` repeated (1 MiB took seconds): reading a line 8× longer for
    a sign costs no more than reading one at the cap's length twice, whatever the patterns."""
    text = "Received a dump signal "
    at_cap, longer = ((text * (n // len(text) + 1))[:n] for n in (2 * CHECKED_CHARS, 16 * CHECKED_CHARS))
    sign_of(at_cap, 3)
    growth = _growth(partial(sign_of, restarts=3), at_cap, longer)
    assert growth < 3, f"a line 8× longer took ×{growth:.1f} as long"
    # the cap reads the line's start: a failure said there is still a sign, one buried past it is not
    assert sign_of(XID_LINE + " " + "a" * (16 * CHECKED_CHARS), 3) == ("gpu_xid_error", "device fault")
    assert sign_of("a" * CHECKED_CHARS + XID_LINE, 3) is None


# --- 2. a rotated log is followed on -------------------------------------------------------------------

def _plan(tmp_path: Path) -> Plan:
    """A collection that finds nothing and takes a tenth of a second: what is tested is the following."""
    return Plan(tmp_path / "captures", titles=["^no-such-process$"], rounds=1, round_interval_s=0.1, scrapes=1,
                journal=tmp_path)


def _read_to_end(path: Path) -> None:
    """Wait (bounded) until this process holds `path` open at its end: the watcher follows it."""
    target, deadline = os.path.realpath(path), time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        for fd in os.listdir("/proc/self/fd"):
            try:
                if os.readlink(f"/proc/self/fd/{fd}") != target:
                    continue
                at = re.search(r"pos:\s+(\d+)", Path(f"/proc/self/fdinfo/{fd}").read_text())
            except OSError:  # an fd closed meanwhile
                continue
            if at and int(at[1]) == path.stat().st_size:
                return
        time.sleep(0.05)
    raise AssertionError(f"the watcher did not open {path} within {WAIT_S:g} s")


def _watcher(w: SignWatch) -> tuple[threading.Thread, dict[str, object]]:
    """`follow(w)` in a thread; its bundles, or what it raised, in the dict."""
    result: dict[str, object] = {}

    def run() -> None:
        try:
            result["bundles"] = follow(w)
        except Exception as error:  # noqa: BLE001 - the test says what it was
            result["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def _append(path: Path, *lines: str) -> None:
    with open(path, "a") as out:  # one write, as a process's own log handler (O_APPEND) makes it
        out.write("".join(line + "\n" for line in lines))


def _rename_and_create(log: Path) -> None:
    log.rename(log.with_name(log.name + ".1"))  # logrotate's default: the old file renamed, a new one
    log.write_text("[2026-06-18 21:00:05] started again after rotation\n")


def _copy_and_truncate(log: Path) -> None:
    shutil.copy(log, log.with_name(log.name + ".1"))  # `copytruncate`: copied, then cut to nothing
    with open(log, "r+") as cut:
        cut.truncate(0)


@pytest.mark.skipif(not Path("/proc/self/fdinfo").is_dir(), reason="reads /proc to see the watcher follow")
@pytest.mark.parametrize("rotate", [_rename_and_create, _copy_and_truncate], ids=["renamed", "copytruncate"])
def test_a_failure_line_after_the_log_is_rotated_is_caught(tmp_path: Path, rotate: Callable[[Path], None]) -> None:
    log = tmp_path / "engine.log"
    log.write_text("".join(f"[2026-06-18 21:00:{n % 60:02d}] Decode batch. #running-req: 1\n" for n in range(100)))
    stop, said = threading.Event(), io.StringIO()
    thread, result = _watcher(SignWatch(_plan(tmp_path), log, flight_recorder_wait_s=0, log=said, stop=stop))
    try:
        _read_to_end(log)  # followed from its end (~4 KiB in)
        rotate(log)
        _append(log, XID_LINE)  # shorter than what was read of the old file
        thread.join(timeout=WAIT_S)
    finally:
        stop.set()
    assert "error" not in result, result
    assert result.get("bundles"), f"no capture within {WAIT_S:g} s of the line:\n{said.getvalue()}"
    (bundle,) = result["bundles"]  # type: ignore[misc]
    assert "\tgpu_xid_error\tdevice fault\tNVRM: Xid (PCI:0000:3b:00): 79" in (bundle / "sign.txt").read_text()
    assert "(rotated" in said.getvalue()  # the watcher says it follows on


# --- 3. a burst of failure lines: one capture per kind, each in a folder of its own ---------------------

@pytest.mark.skipif(not Path("/proc/self/fdinfo").is_dir(), reason="reads /proc to see the watcher follow")
def test_a_burst_of_failure_lines_captures_each_kind_once_in_folders_of_their_own(tmp_path: Path) -> None:
    """One NCCL timeout: a line per rank, written at once, then an Xid in the same second. The
    first timeout line captures, the 7 others are held back by the cooldown (and the log says so),
    the Xid captures into a folder of its own (before, the second capture of the second found the
    first's folder and the watcher ended with rc 2)."""
    log = tmp_path / "engine.log"
    log.write_text("[2026-06-18 21:00:00] started\n")
    stop, said = threading.Event(), io.StringIO()
    out = tmp_path / "captures"
    thread, result = _watcher(SignWatch(_plan(tmp_path), log, flight_recorder_wait_s=0, once=False, log=said,
                                        stop=stop))
    try:
        _read_to_end(log)
        _append(log, *(TIMEOUT_LINE.format(r=r) for r in range(8)), XID_LINE)
        deadline = time.monotonic() + WAIT_S
        while thread.is_alive() and time.monotonic() < deadline and len(list(out.glob("*/sign.txt"))) < 2:
            time.sleep(0.05)
        time.sleep(3 * 0.2)  # a few more of the watcher's polls: any further capture would start in them
    finally:
        stop.set()
        thread.join(timeout=WAIT_S)
    assert "error" not in result, f"{result['error']!r}\n{said.getvalue()}"
    bundles = result["bundles"]
    assert isinstance(bundles, list) and len(bundles) == 2, said.getvalue()
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in bundles)  # no other folder
    kinds = [(b / "sign.txt").read_text().split("\t")[1] for b in bundles]
    assert kinds == ["collective_timeout", "gpu_xid_error"]
    held = [line for line in said.getvalue().splitlines() if "not captured" in line]
    assert len(held) == 1 and "(collective_timeout)" in held[0] and str(bundles[0]) in held[0]
    assert not thread.is_alive()


def test_captures_in_the_same_second_get_folders_of_their_own(tmp_path: Path) -> None:
    at = datetime(2026, 6, 18, 21, 0, 0, tzinfo=UTC)
    folders = [new_bundle(tmp_path / "captures", at) for _ in range(3)]
    assert [f.name for f in folders] == ["20260618T210000Z", "20260618T210000Z-2", "20260618T210000Z-3"]
    assert all(f.is_dir() and not any(f.iterdir()) for f in folders)


# --- 4. what a capture writes of the line shows its control characters --------------------------------

CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def test_escape_sequences_in_the_line_are_written_visible(tmp_path: Path) -> None:
    """A line that sets the terminal's title, clears its screen, rings, writes the clipboard (OSC 52)
    and holds a tab, a NUL and a DEL: `sign.txt` (and the watcher's log) show each as `\\xNN`, and
    keep their four columns."""
    line = ("\x1b]0;pwned\x07\x1b[2J\x1b]52;c;cm0gLXJmIH4=\x07 " + TIMEOUT_LINE.format(r=0)
            + "\tNUL\x00 DEL\x7f CSI\x9b")
    said = io.StringIO()
    bundle = capture(Sign("collective_timeout", "collective timeout", line, datetime.now(UTC)),
                     SignWatch(_plan(tmp_path), flight_recorder_wait_s=0, log=said))
    written = (bundle / "sign.txt").read_text()
    assert not CONTROLS.search(written) and not CONTROLS.search(said.getvalue())
    _, kind, fault, shown = written.rstrip("\n").split("\t")
    assert (kind, fault) == ("collective_timeout", "collective timeout")
    assert shown.startswith("\\x1b]0;pwned\\x07\\x1b[2J\\x1b]52;c;cm0gLXJmIH4=\\x07 [rank0]:")
    assert shown.endswith("timing out.\\x09NUL\\x00 DEL\\x7f CSI\\x9b")


def test_a_cut_line_says_so_in_the_sign(tmp_path: Path) -> None:
    line = XID_LINE + " " + "a" * (4 * CHECKED_CHARS)
    said = io.StringIO()
    bundle = capture(Sign("gpu_xid_error", "device fault", line, datetime.now(UTC)),
                     SignWatch(_plan(tmp_path), flight_recorder_wait_s=0, log=said))
    shown = (bundle / "sign.txt").read_text().rstrip("\n").split("\t")[3]
    assert shown.startswith(XID_LINE) and shown.endswith(f"[cut: a line of more than {CHECKED_CHARS:,} characters, "
                                                         "only these first ones checked]")
    assert len(shown) < CHECKED_CHARS + 100
    assert f"only its first {CHECKED_CHARS:,} checked" in said.getvalue()
