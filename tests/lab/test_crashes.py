"""Processes that die on a signal or fail to write, for real: a Python engine that segfaults under
faulthandler, a worker its shell reports Killed (SIGKILL), a rank that cannot reach its master, a
write to a full disk. Their own output is the evidence (a server log each, as `nohup … >
engine.log 2>&1` keeps it); what happened is known from the exit status and the pid, not from
forensics: each must be a finding, never "no incident"."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from forensics.analyze import analyze

LOGGING = "import logging, os; logging.basicConfig(level=logging.INFO, format='%(asctime)s %(levelname)s %(message)s')"


def _log_of(command: list[str], path: Path) -> int:
    """Run `command` with its stdout and stderr into `path`, as a server log is kept; its exit status."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as out:
        return subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, timeout=60).returncode


def test_a_segfault_and_a_sigkill_are_findings_with_their_own_words(tmp_path: Path) -> None:
    logs = tmp_path / "bundle" / "logs" / "gpu-node-00"
    engine = (f"{LOGGING}; import ctypes; logging.info('engine up, pid %d', os.getpid()); "
              "[logging.info('step %d done', step) for step in range(3)]; ctypes.string_at(0)")
    status = _log_of([sys.executable, "-X", "faulthandler", "-c", engine], logs / "engine.log")
    assert status == -signal.SIGSEGV  # it did die on the signal, before forensics says so
    worker = f"{LOGGING}; import signal; logging.info('worker pid %d', os.getpid()); os.kill(os.getpid(), signal.SIGKILL)"
    # a command after the child keeps bash from exec'ing it: bash itself then reports the kill
    _log_of(["bash", "-c", f'{sys.executable} -c "{worker}"; true'], logs / "worker.log")
    pid = (logs / "worker.log").read_text().splitlines()[0].rsplit(" ", 1)[1]
    assert f"{pid} Killed" in (logs / "worker.log").read_text()  # bash's own words

    analysis = analyze(tmp_path / "bundle", tmp_path / "case")
    kinds = {f.kind: f for f in analysis.findings}
    assert "Fatal Python error: Segmentation fault" in kinds["fatal_signal"].text
    assert f"{pid} Killed" in kinds["shell_killed"].text and "SIGKILL" in kinds["shell_killed"].text
    assert all(f.host == "gpu-node-00" and f.at is not None for f in (kinds["fatal_signal"], kinds["shell_killed"]))
    assert analysis.incident_found
    # what makes another incident the same problem ("seen before") names both modes
    assert {"symptom: fatal_signal", "symptom: shell_killed"} <= set(analysis.signature()["parts"])
    assert {e["path"]: e["quarantined"] for e in analysis.timeline.manifest["inputs"]} == {
        os.path.join("logs", "gpu-node-00", "engine.log"): 0, os.path.join("logs", "gpu-node-00", "worker.log"): 0}


def test_the_kernels_own_segfault_line_names_the_process(tmp_path: Path) -> None:
    """The kernel's report of the same kind of crash (`dmesg -T`), read from its ring buffer after a
    real Python process read address 0. Skipped, with the reason, where the ring buffer cannot be
    read or the kernel does not report unhandled signals (CI runs as root and does)."""
    before = subprocess.run(["dmesg", "-T"], capture_output=True, text=True, check=False)
    if before.returncode != 0:
        pytest.skip(f"the kernel's ring buffer cannot be read here: {before.stderr.strip()[:200]}")
    crashed = subprocess.run([sys.executable, "-c", "import os, ctypes; print(os.getpid(), flush=True); "
                              "ctypes.string_at(0)"], capture_output=True, text=True, timeout=60)
    assert crashed.returncode == -signal.SIGSEGV
    pid = crashed.stdout.split()[0]
    after = subprocess.run(["dmesg", "-T"], capture_output=True, text=True, check=False).stdout.splitlines()
    said = [line for line in after if f"[{pid}]: segfault at " in line]
    if not said:
        pytest.skip("the kernel did not report the segfault (debug.exception-trace off, or rate-limited)")
    logs = tmp_path / "bundle" / "logs" / "gpu-node-00"
    logs.mkdir(parents=True)
    (logs / "dmesg.txt").write_text(said[0] + "\n")

    analysis = analyze(tmp_path / "bundle", tmp_path / "case")
    (found,) = [f for f in analysis.findings if f.kind == "segfault"]
    assert f"[{pid}]: segfault at" in found.text and found.host == "gpu-node-00" and found.at is not None
    assert analysis.incident_found


def test_a_rank_that_cannot_reach_its_master_is_a_rendezvous_failure(tmp_path: Path) -> None:
    """A real gloo rank 1 whose rank 0 never starts: torch's TCPStore client times out. Its log (as
    kept) must say so, naming where it tried to connect, never "no incident"."""
    pytest.importorskip("torch.distributed")
    logs = tmp_path / "bundle" / "logs" / "gpu-node-00"
    rank = (f"{LOGGING}; import datetime, socket, torch.distributed as dist; s = socket.socket(); s.bind(('127.0.0.1', 0)); "
            "port = s.getsockname()[1]; s.close(); logging.info('rank 1 joining 127.0.0.1:%d', port); "
            "dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=1, world_size=2, "
            "timeout=datetime.timedelta(seconds=2))")
    assert _log_of([sys.executable, "-c", rank], logs / "train.log") != 0  # it failed, before forensics says so
    port = (logs / "train.log").read_text().splitlines()[0].rsplit(":", 1)[1]

    analysis = analyze(tmp_path / "bundle", tmp_path / "case")
    found = [f for f in analysis.findings if f.kind == "rendezvous_failure"]
    # torch names it `(127.0.0.1, PORT)` when it gives up, `127.0.0.1:PORT` in the retries it logs
    # first on a loaded machine: the finding quotes the first of its lines, either names the place
    assert found and re.search(rf"127\.0\.0\.1(?:, |:){port}\b", found[0].text) and found[0].host == "gpu-node-00"
    assert analysis.incident_found


def test_a_write_to_a_full_disk_is_a_finding_and_its_traceback_is_read(tmp_path: Path) -> None:
    """A real ENOSPC: a Python server writes to /dev/full after its own log line; the traceback,
    folded into that record by the log reader, is read, and the full disk is named."""
    logs = tmp_path / "bundle" / "logs" / "gpu-node-00"
    server = (f"{LOGGING}; logging.info('checkpoint save begins'); f = open('/dev/full', 'w'); f.write('x'); "
              "f.flush()")
    assert _log_of([sys.executable, "-c", server], logs / "server.log") != 0
    assert "OSError: [Errno 28] No space left on device" in (logs / "server.log").read_text()

    analysis = analyze(tmp_path / "bundle", tmp_path / "case")
    kinds = {f.kind: f for f in analysis.findings}
    assert "No space left on device" in kinds["disk_full"].text
    assert kinds["traceback"].text.endswith("OSError: [Errno 28] No space left on device")
    assert analysis.incident_found and "symptom: disk_full" in analysis.signature()["parts"]
