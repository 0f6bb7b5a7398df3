"""`forensics collect` against real processes, no mocks: the torch gloo TP-desync lab (8 ranks,
a real hang), the lab's SGLang-shaped /metrics endpoint with frozen counters and pending requests,
and a journal made by systemd-journal-remote read with `--journal` (no running journald needed).
The bundle it writes gives the desync verdict and the freeze; what it could not have is said."""

from __future__ import annotations

import json
import socket
import time
import subprocess
import tarfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from forensics.analyze import analyze
from forensics.capture.collect import collect
from forensics.capture.plan import Plan
from forensics.capture.sh_script import script
from forensics.cli import main
from forensics.detect.stack_verdict import TP_DESYNC
from forensics.detect.stacks import latest
from forensics.lab.sglang_metrics import SGLangMetrics
from forensics.lab.tp_desync import TpDesyncLab
from tests.conftest import export_entry, to_journal


def _journal(folder: Path) -> Path:
    """Decode's journal of the last ten minutes: batch lines with work pending until eight minutes
    ago, then only health checks answered 200 (a silent hang), as a real .journal directory."""
    now = datetime.now(UTC).replace(microsecond=0)
    entries = []
    for n in range(150):
        at = now - timedelta(minutes=10) + timedelta(seconds=4 * n)
        stamp = at.strftime("%Y-%m-%d %H:%M:%S")
        message = (f"[{stamp} TP0] Decode batch. #running-req: 12, #token: 9000, token usage: 0.4, "
                   "gen throughput (token/s): 800.00, #queue-req: 3, " if at < now - timedelta(minutes=8)
                   else 'INFO:     127.0.0.1:40000 - "GET /health HTTP/1.1" 200 OK')
        entries.append(export_entry(
            ("__CURSOR", f"s=collect;i={n}"), ("__REALTIME_TIMESTAMP", str(int(at.timestamp() * 1e6))),
            ("__MONOTONIC_TIMESTAMP", str(1_000_000 + n)), ("_BOOT_ID", "2" * 32), ("_HOSTNAME", "gpu-node-00"),
            ("_SYSTEMD_UNIT", "sglang-decode.service"), ("SYSLOG_IDENTIFIER", "python3"), ("_PID", "4242"),
            ("MESSAGE", message)))
    journal_dir = folder / "journal-copy"
    journal_dir.mkdir()
    to_journal(b"".join(entries), journal_dir, "system")
    (journal_dir / "system.export").unlink()
    return journal_dir


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("collect")
    metrics = SGLangMetrics("decode")
    for _ in range(3):
        metrics.step()
    metrics.stall()
    server, _, port = metrics.serve()
    try:
        with TpDesyncLab() as lab:
            lab.trigger()
            groups = {role: ",".join(str(r.process.pid) for r in lab.ranks if r.role == role)
                      for role in ("prefill", "decode")}
            out = folder / "bundle"
            argv = ["collect", str(out), "--journal", str(_journal(folder)), "--unit", "sglang-decode.service",
                    "--metrics", f"decode=127.0.0.1:{port}", "--metrics", f"127.0.0.1:{_dead_port()}",
                    "--scrapes", "3", "--scrape-interval", "1", "--rounds", "2", "--round-interval", "1",
                    "--title", "^no-such-process$", "--pids", f"decode={groups['decode']}",
                    "--pids", f"prefill={groups['prefill']}", "--pids", "gone=999999"]
            assert main(argv) == 0
            yield out
    finally:
        server.shutdown()


def test_the_bundle_it_writes_gives_the_desync_and_the_freeze(collected: Path, tmp_path: Path) -> None:
    analysis = analyze(collected, tmp_path / "case")
    verdicts = {v.group: v for v in latest(analysis.verdicts)}
    assert verdicts["decode"].verdict == TP_DESYNC and verdicts["decode"].collective == "all_reduce"
    assert verdicts["decode"].progress and set(verdicts["decode"].progress.values()) == {"STUCK"}
    frozen = [f for f in analysis.findings if f.kind == "frozen"]
    assert [f.component for f in frozen] == ["decode"]
    assert any(f.kind == "silent_hang" for f in analysis.findings)
    scrapes = (collected / "metrics").glob("*/scrapes.prom")
    (decode_scrapes,) = list(scrapes)
    assert decode_scrapes.read_text().count("# capture ts=") == 3


def test_what_could_not_be_collected_is_written_down(collected: Path) -> None:
    record = json.loads((collected / "collect.json").read_text())
    missing = {item["what"].split(" (round")[0]: item["why"] for item in record["could_not_collect"]}
    assert any(what.startswith("metrics http://127.0.0.1:") and "refused" in why.lower()
               for what, why in missing.items())
    assert missing["GPU state"] == "neither nvidia-smi nor npu-smi found"
    assert "stacks of pid 999999" in missing  # a process that is gone: py-spy's own error kept
    rounds = (collected / "stacks" / "round-1.txt").read_text()
    assert "pid=999999 group=gone" in rounds and "Error:" in rounds
    toml = (collected / "incident.toml").read_text()
    assert '[components."decode"]' in toml and "sglang-decode.service" in toml and '[hosts."' in toml


def test_the_script_is_posix_sh_and_its_tar_renders(tmp_path: Path) -> None:
    journal = _journal(tmp_path)
    done = subprocess.run(["forensics", "collect", str(tmp_path / "unused"), "--script", "--journal", str(journal),
                           "--rounds", "1", "--scrapes", "1", "--metrics", f"127.0.0.1:{_dead_port()}"],
                          capture_output=True, text=True, check=False, cwd=tmp_path,
                          env={"PATH": str(Path(__file__).resolve().parents[2] / ".venv" / "bin") + ":/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    script = tmp_path / "collect.sh"
    script.write_text(done.stdout)
    assert subprocess.run(["sh", "-n", str(script)], capture_output=True).returncode == 0
    tarball = tmp_path / "remote-incident.tar"
    with open(tarball, "wb") as out:
        assert subprocess.run(["sh", str(script)], stdout=out, timeout=300).returncode == 0
    with tarfile.open(tarball) as tar:
        names = tar.getnames()
    assert any(n.endswith(".export") for n in names) and "./could-not-collect.tsv" in names
    assert main(["report", str(tarball), "--out", str(tmp_path / "report")]) == 0
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert [f["component"] for f in summary["findings"] if f["kind"] == "frozen"] == ["decode"]


def test_ptrace_refused_is_written_down_and_a_toml_gives_the_choices(tmp_path: Path) -> None:
    """A process that cannot be traced (not dumpable, and collect without CAP_SYS_PTRACE): the
    bundle keeps py-spy's refusal as that process's dump, and says it could not collect it."""
    import shutil
    import sys

    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) not installed")
    target = subprocess.Popen([sys.executable, "-c", "import ctypes, time\n"
                               "ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0\ntime.sleep(60)"])
    try:
        time.sleep(0.5)
        config = tmp_path / "collect.toml"
        config.write_text(f'pids = {{engine = [{target.pid}]}}\ntitles = ["^no-such-process$"]\nrounds = 1\n'
                          'scrapes = 1\n')
        done = subprocess.run(["setpriv", "--bounding-set=-sys_ptrace",
                               str(Path(sys.executable).parent / "forensics"), "collect", str(tmp_path / "bundle"),
                               "--config", str(config), "--journal", str(tmp_path)],
                              capture_output=True, text=True, check=False, timeout=120)
        assert done.returncode == 0, done.stderr
        record = json.loads((tmp_path / "bundle" / "collect.json").read_text())
        why = {item["what"]: item["why"] for item in record["could_not_collect"]}
        assert f"stacks of pid {target.pid} (round 1)" in why, why
        rounds = (tmp_path / "bundle" / "stacks" / "round-1.txt").read_text()
        assert f"pid={target.pid} group=engine" in rounds and "Error:" in rounds
        assert f"could not collect stacks of pid {target.pid}" in done.stdout
    finally:
        target.kill()
        target.wait()


def test_the_box_own_state_kernel_gpu_and_flight_recorder_dumps(tmp_path: Path) -> None:
    """The kernel's messages, the GPU state (absent here: written down as absent) and the Flight
    Recorder dumps found where the process's own environment says torch writes them — by the local
    collector and by the script alike."""
    import socket
    import sys

    dumps = tmp_path / "fr"
    dumps.mkdir()
    for rank in (0, 1):
        (dumps / f"trace_{rank}").write_bytes(b"\x80\x04 a dump of rank %d" % rank)
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                              env={"TORCH_FR_DUMP_TEMP_FILE": str(dumps / "trace_"), "PATH": "/usr/bin:/bin"})
    try:
        time.sleep(0.3)
        host = socket.gethostname()
        plan = Plan(tmp_path / "bundle", pids={"decode": [target.pid]}, titles=["^no-such-process$"], rounds=1,
                    scrapes=1, journal=tmp_path)
        done = collect(plan)
        assert {f"flight_recorder/{host}/trace_0", f"flight_recorder/{host}/trace_1"} <= set(done.written)
        missing = {item["what"]: item["why"] for item in done.missing}
        assert missing.get("GPU state") == "neither nvidia-smi nor npu-smi found"
        assert any(w.startswith(f"journal/{host}-kernel") or w.endswith("dmesg.log") for w in done.written) \
            or any(k.startswith("kernel messages") for k in missing)
        text = script(plan)
        (tmp_path / "collect.sh").write_text(text)
        with open(tmp_path / "remote.tar", "wb") as out:
            assert subprocess.run(["sh", str(tmp_path / "collect.sh")], stdout=out, timeout=300).returncode == 0
        with tarfile.open(tmp_path / "remote.tar") as tar:
            names = tar.getnames()
            rows = tar.extractfile("./could-not-collect.tsv").read().decode()  # type: ignore[union-attr]
        assert f"./flight_recorder/{host}/trace_0" in names and f"./flight_recorder/{host}/trace_1" in names
        assert "GPU state\tneither nvidia-smi nor npu-smi found" in rows
        assert any(n.endswith("-kernel.export") or n.endswith("dmesg.log") for n in names) or "kernel messages" in rows
    finally:
        target.kill()
        target.wait()


@pytest.mark.parametrize("by", ["collect", "script"])
def test_a_journal_file_named_like_a_glob_pattern_is_collected_alone(tmp_path: Path, by: str) -> None:
    """journalctl expands a glob in `--file`: `--journal 'sys[1].journal'` must read that file, not
    the `sys1.journal` beside it that the pattern matches."""
    def entry(n: int, message: str) -> bytes:
        return export_entry(("__REALTIME_TIMESTAMP", str(int(time.time() * 1e6) - 60_000_000 + n)),
                            ("__MONOTONIC_TIMESTAMP", str(1_000 + n)), ("_BOOT_ID", "3" * 32),
                            ("_HOSTNAME", "gpu-node-00"), ("MESSAGE", message))

    folder = tmp_path / "journals"
    folder.mkdir()
    named = to_journal(entry(0, "in the file named"), folder, "sys[1]")
    to_journal(entry(1, "in the file the pattern matches"), folder, "sys1")
    out = tmp_path / "bundle"
    plan = Plan(out=out, journal=named, rounds=1, scrapes=1, round_interval_s=0, since="-1h",
                titles=["^no-such-process$"])
    if by == "collect":
        collect(plan)
        export = (out / "journal" / f"{plan.host}.export").read_bytes()
    else:
        import io

        done = subprocess.run(["sh", "-c", script(plan)], capture_output=True, timeout=120, check=True)
        with tarfile.open(fileobj=io.BytesIO(done.stdout)) as tar:
            (member,) = [m for m in tar.getmembers() if m.name.endswith(".export") and "-kernel" not in m.name]
            export = tar.extractfile(member).read()
    assert b"MESSAGE=in the file named" in export and b"pattern matches" not in export
