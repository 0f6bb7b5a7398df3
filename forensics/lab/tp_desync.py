"""Run the TP-desync lab: 8 real ranks (prefill TP4 + decode TP4), trigger the wedge, dump every rank.

    python -m forensics.lab.tp_desync OUT [--rounds 2] [--interval 1] [--at 2026-06-18T21:40:10Z]
                                          [--host gpu-node-00] [--format text|json]…

writes a bundle folder OUT with `stacks/text/round-N.txt` (all 8 `py-spy dump` outputs of a round,
each after its capture header) and `stacks/json/round-N/<role>-tp<rank>.json` (`--json`). `--at`
dates the first round at that time instead of now (later rounds keep their real spacing), so the
dumps can stand in a reference incident's timeline. `--flight-recorder` also leaves each rank's
Flight Recorder dump (torch's own, the ranks record with `TORCH_FR_BUFFER_SIZE`) in
`flight_recorder/<role>/nccl_trace_rank_<rank>`, taken after the last round; their times are the
real clock's, so it does not go with `--at`. Every process the lab starts is killed when
it stops, also when it fails; the ranks also ask the kernel to kill them if the lab dies.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Self

from forensics.errors import MissingSystemDependency
from forensics.lab import LabError

ROLES = ("prefill", "decode")
READY_TIMEOUT_S = 180.0
RECORDER_TIMEOUT_S = 30.0
HANG_AGE_S = 12.0  # the recorders are dumped once the wedge is older than a moment (detect.collectives.MOMENT_S)
RECORDER_ENTRIES = "2000"  # the ring each rank's Flight Recorder keeps (TORCH_FR_BUFFER_SIZE)
SETTLE_S = 1.0  # after the trigger: the wedge forms within one loop iteration (milliseconds)



@dataclass
class Rank:
    """One started rank process."""

    role: str
    rank: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def title(self) -> str:
        """The process title the rank sets, as SGLang does."""
        return f"sglang::scheduler_TP{self.rank}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def py_spy() -> str:
    """The py-spy executable beside this Python, or on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if not found:
        raise MissingSystemDependency("py-spy is not installed: pip install -e '.[lab]' (or pip install py-spy)")
    return found


class TpDesyncLab:
    """Start the 8 ranks on `with`, stop them all when the block ends, however it ends."""

    def __init__(self, world: int = 4, workdir: Path | None = None) -> None:
        self.world = world
        self._own_dir = workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="forensics-lab-")) if workdir is None else workdir
        self.control = self.workdir / "control"
        self.ranks: list[Rank] = []
        self.shift = timedelta(0)
        self.triggered: float | None = None

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        """Start both engines and wait until every rank has run a few batches."""
        self.control.mkdir(parents=True, exist_ok=True)
        for role in ROLES:
            port = _free_port()
            for rank in range(self.world):
                log = self.workdir / f"{role}-tp{rank}.log"
                with open(log, "wb") as out:
                    process = subprocess.Popen(
                        [sys.executable, "-m", "forensics.lab.engine", "--role", role, "--rank", str(rank),
                         "--world", str(self.world), "--port", str(port), "--control", str(self.control)],
                        stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                        env={**os.environ, "TORCH_FR_BUFFER_SIZE": RECORDER_ENTRIES})
                self.ranks.append(Rank(role, rank, process, log))
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not all((self.control / f"ready-{r.role}-{r.rank}").exists() for r in self.ranks):
            self._check_alive()
            if time.monotonic() > deadline:
                raise LabError(f"lab ranks not ready after {READY_TIMEOUT_S:.0f} s; logs in {self.workdir}")
            time.sleep(0.2)

    def _check_alive(self) -> None:
        for r in self.ranks:
            if r.process.poll() is not None:
                tail = r.log.read_text(errors="replace")[-2000:]
                raise LabError(f"lab rank {r.role} TP{r.rank} exited with {r.process.returncode}:\n{tail}")

    def trigger(self) -> None:
        """Send the aborted batch that desynchronises the decode group, and let the wedge form."""
        (self.control / "trigger").touch()
        self.triggered = time.monotonic()
        time.sleep(SETTLE_S)
        self._check_alive()

    def capture(self, bundle: Path, *, rounds: int = 2, interval: float = 1.0,
                formats: tuple[str, ...] = ("text", "json"), at: datetime | None = None,
                host: str | None = None) -> list[Path]:
        """Dump every rank with py-spy, `rounds` times; returns the files written. `host` names the
        machine in the capture headers (default: this one's hostname)."""
        spy = py_spy()
        host = host or socket.gethostname()
        written: list[Path] = []
        if at is not None:
            self.shift = at - datetime.now(UTC)
        for number in range(1, rounds + 1):
            if number > 1:
                time.sleep(interval)
            text_lines: list[str] = []
            for r in self.ranks:
                for fmt in formats:
                    now = (datetime.now(UTC) + self.shift).isoformat(timespec="milliseconds").replace("+00:00", "Z")
                    header = (f"# capture ts={now} host={host} pid={r.process.pid} group={r.role} "
                              f"title={r.title}\n")
                    argv = [spy, "dump", "--pid", str(r.process.pid)] + (["--json"] if fmt == "json" else [])
                    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
                    body = done.stdout if done.returncode == 0 else done.stdout + done.stderr
                    if fmt == "text":
                        text_lines.append(header + body)
                    else:
                        path = bundle / "stacks" / "json" / f"round-{number}" / f"{r.role}-tp{r.rank}.json"
                        path.parent.mkdir(parents=True, exist_ok=True)
                        path.write_text(header + body)
                        written.append(path)
            if text_lines:
                path = bundle / "stacks" / "text" / f"round-{number}.txt"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("".join(text_lines))
                written.append(path)
        return written

    def dump_flight_recorders(self, bundle: Path) -> list[Path]:
        """Have every rank write its Flight Recorder dump (the ranks in the hung collective too) into
        `bundle/flight_recorder/<role>/`, once the wedge is `HANG_AGE_S` old; returns the files written."""
        if self.triggered is not None:
            time.sleep(max(0.0, self.triggered + HANG_AGE_S - time.monotonic()))
        (self.control / "dump-fr").touch()
        made = [self.control / "fr" / r.role / f"nccl_trace_rank_{r.rank}" for r in self.ranks]
        deadline = time.monotonic() + RECORDER_TIMEOUT_S
        while not all(path.is_file() for path in made):
            self._check_alive()
            if time.monotonic() > deadline:
                missing = [str(path) for path in made if not path.is_file()]
                raise LabError(f"no Flight Recorder dump after {RECORDER_TIMEOUT_S:.0f} s: {missing}")
            time.sleep(0.1)
        written = []
        for r, path in zip(self.ranks, made, strict=True):
            target = bundle / "flight_recorder" / r.role / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)  # its time says when it was written
            written.append(target)
        return written

    def stop(self) -> None:
        """Kill every rank (and anything it started) and reap it."""
        for r in self.ranks:
            if r.process.poll() is None:
                try:
                    os.killpg(r.process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for r in self.ranks:
            try:
                r.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                r.process.kill()
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Run the lab once and write the bundle."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--at", help="ISO-8601 UTC time to date the first round at")
    parser.add_argument("--format", action="append", choices=["text", "json"])
    parser.add_argument("--host", help="host name for the capture headers (default: this machine's)")
    parser.add_argument("--flight-recorder", action="store_true",
                        help="also leave every rank's Flight Recorder dump (real times: not with --at)")
    args = parser.parse_args(argv)
    if args.flight_recorder and args.at:
        parser.error("--flight-recorder records real times, which --at would not match: use one or the other")
    at = datetime.fromisoformat(args.at) if args.at else None
    with TpDesyncLab() as lab:
        lab.trigger()
        files = lab.capture(args.out, rounds=args.rounds, interval=args.interval,
                            formats=tuple(args.format or ("text", "json")), at=at, host=args.host)
        if args.flight_recorder:
            files += lab.dump_flight_recorders(args.out)
    for path in files:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
