"""Many hosts in one go, over a real sshd on loopback (Debian's openssh-server, started here with its
own host key and an authorised key on a free port, reached through a generated ssh config): two
"hosts" (two names for loopback) collected in parallel, one unreachable, one whose connection
stalls past the deadline. Each gives a folder or a "could not collect" row, never a hang, and a
collected host's bundle gives the verdict a local collect gives."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from forensics.analyze import analyze
from forensics.capture.collect import collect
from forensics.capture.plan import Plan
from forensics.capture.fleet import collect_fleet

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
pytestmark = pytest.mark.skipif(not Path(SSHD).exists() or shutil.which("ssh") is None or os.geteuid() != 0,
                                reason="openssh-server and -client, run as root (sshd's privilege separation)")
STUCK = """
import setproctitle
setproctitle.setproctitle("sglang::scheduler_TP0")
def synchronize():
    while True: pass  # one line: every dump sees the same frame
synchronize()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def ssh_config(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    lab = tmp_path_factory.mktemp("ssh")
    for key in ("host_key", "client_key", "stall_key", "evil_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(lab / key)], check=True)
    # the stalling host: its key may only run a command that never ends (the script stalls there);
    # the compromised host: whatever it is asked, it answers with an attacker's tar stream
    (lab / "authorized_keys").write_text((lab / "client_key.pub").read_text()
                                         + 'command="sleep 600" ' + (lab / "stall_key.pub").read_text()
                                         + f'command="cat {lab / "evil.tar"}" ' + (lab / "evil_key.pub").read_text())
    port, closed = _free_port(), _free_port()
    venv_bin = Path(sys.executable).parent
    (lab / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {lab / 'host_key'}\nAuthorizedKeysFile {lab / 'authorized_keys'}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nUsePAM no\n"
        f"StrictModes no\nPidFile {lab / 'sshd.pid'}\nSetEnv PATH={venv_bin}:/usr/local/bin:/usr/bin:/bin\n")
    Path("/run/sshd").mkdir(exist_ok=True)
    daemon = subprocess.Popen([SSHD, "-D", "-f", str(lab / "sshd_config"), "-E", str(lab / "sshd.log")])
    common = "  User root\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n"
    client, stall = f"  IdentityFile {lab / 'client_key'}\n", f"  IdentityFile {lab / 'stall_key'}\n"
    evil = f"  IdentityFile {lab / 'evil_key'}\n"
    (lab / "ssh_config").write_text(
        f"Host node-evil\n  HostName 127.0.0.1\n  Port {port}\n{evil}{common}"
        f"Host node-a node-b\n  HostName 127.0.0.1\n  Port {port}\n{client}{common}"
        f"Host node-down\n  HostName 127.0.0.1\n  Port {closed}\n{client}{common}"
        f"Host node-stall\n  HostName 127.0.0.1\n  Port {port}\n{stall}{common}")
    for _ in range(100):
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    yield lab / "ssh_config"
    daemon.terminate()
    daemon.wait(timeout=10)


def test_a_compromised_hosts_stream_writes_nothing_outside_its_folder_and_keeps_its_files(
        ssh_config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What a compromised host could send instead of the collector's tar: CVE-2025-4517's link
    chain aimed at the folders above OUT, a hard link, then ordinary evidence after them."""
    import gzip

    from forensics.cli import main
    from tests.hostile.test_unpack import realpath_overflow_tarball

    packed = tmp_path / "evil.tar.gz"
    realpath_overflow_tarball(packed, len(str(tmp_path / "fleet" / "node-evil")), climb=2,
                              extra={"rounds-started.txt": b"nan\n"})
    (ssh_config.parent / "evil.tar").write_bytes(gzip.decompress(packed.read_bytes()))
    said = main(["collect", str(tmp_path / "fleet"), "--host", "node-evil", "--ssh-config", str(ssh_config),
                 "--title", "^no-such-process$", "--deadline", "30"])
    printed = capsys.readouterr().out
    folder = tmp_path / "fleet" / "node-evil"
    assert said == 1  # a host that sent links is not "collected" silently
    assert list(tmp_path.rglob("authorized_keys")) == [folder / "escape" / "authorized_keys"]
    assert not [p for p in tmp_path.rglob("*") if p.is_symlink()]
    assert (folder / "journal" / "node.export").is_file()  # the rest of the host's evidence is kept
    assert "node-evil: refused escape: not extracted from the host's stream: a symbolic link to a/b/c" in printed
    (row,) = json.loads((tmp_path / "fleet" / "fleet.json").read_text())["hosts"]
    assert {r["path"] for r in row["refused_members"]} >= {"escape", "flaglink"}
    assert row["rounds_started"] is None  # the host's "nan" is no time (it was written into fleet.json as NaN)


def test_two_hosts_in_parallel_one_unreachable_one_past_its_deadline(ssh_config: Path, tmp_path: Path) -> None:
    stuck = subprocess.Popen([sys.executable, "-c", STUCK])
    try:
        time.sleep(1.0)
        plan = Plan(tmp_path / "unused", pids={"decode": [stuck.pid]}, titles=["^no-such-process$"], rounds=2,
                    round_interval_s=1.0, scrapes=1, journal=tmp_path)
        started = time.monotonic()
        results = collect_fleet(tmp_path / "fleet", [(h, plan) for h in ("node-a", "node-b", "node-down", "node-stall")],
                                deadline_s=12, ssh_config=ssh_config, progress=False)
        took = time.monotonic() - started
        local = collect(Plan(tmp_path / "local", pids={"decode": [stuck.pid]}, titles=["^no-such-process$"], rounds=2,
                             round_interval_s=1.0, scrapes=1, journal=tmp_path))
    finally:
        stuck.kill()
        stuck.wait()
    assert took < 12 + 15  # the stalled host ended at its deadline, not at ssh's leisure
    by_host = {r.host: r for r in results}
    assert by_host["node-a"].status == by_host["node-b"].status == "collected"
    assert by_host["node-down"].status == "failed" and "Connection refused" in (by_host["node-down"].why or "")
    assert by_host["node-stall"].status == "failed" and "within the deadline (12 s)" in (by_host["node-stall"].why or "")
    record = json.loads((tmp_path / "fleet" / "fleet.json").read_text())
    rows = {h["host"]: h for h in record["hosts"]}
    assert rows["node-down"]["could_not_collect"] and rows["node-a"]["rounds_started_minus_shared_start_s"] is not None
    assert abs(rows["node-a"]["rounds_started"] - rows["node-b"]["rounds_started"]) < 2  # one shared start
    fleet_host = analyze(tmp_path / "fleet" / "node-a", tmp_path / "case-a")
    local_host = analyze(local.out, tmp_path / "case-local")
    kinds = sorted(f.kind for f in fleet_host.findings if f.kind in ("stuck_process", "stack_verdict"))
    assert kinds == sorted(f.kind for f in local_host.findings if f.kind in ("stuck_process", "stack_verdict"))
    assert "stuck_process" in kinds


def test_an_inventory_is_checked_like_the_collectors_own_toml(tmp_path: Path) -> None:
    from forensics.capture.plan import CollectError
    from forensics.capture.fleet import load_inventory

    inventory = tmp_path / "hosts.toml"
    inventory.write_text('[defaults]\nunits = ["sglang-decode.service"]\n\n[[host]]\nname = "gpu-node-00"\n'
                         'rounds = "2"\n\n[[host]]\nname = "gpu-node-01"\nendpoint = ["x"]\n\n[[host]]\nunits = []\n')
    with pytest.raises(CollectError) as raised:
        load_inventory(inventory, tmp_path / "out")
    said = str(raised.value)
    assert "host[0].rounds: expected a whole number from 1 to 50, found '2'" in said
    assert "host[1].endpoint: unknown key" in said and "host[2].name: expected the host's ssh destination" in said
    inventory.write_text('[defaults]\nunits = ["sglang-decode.service"]\n\n[[host]]\nname = "gpu-node-00"\n'
                         'endpoints = ["decode=localhost:30002"]\n')
    ((host, plan),) = load_inventory(inventory, tmp_path / "out")
    assert host == "gpu-node-00" and plan.units == ["sglang-decode.service"] and plan.out == tmp_path / "out" / host


def test_a_sign_on_one_host_captures_every_host(ssh_config: Path, tmp_path: Path) -> None:
    """`watch --follow FILE --host …`: each host's log followed over ssh; the first failure line on
    any of them (an Xid here) collects every host at once, and says which host showed it."""
    import io
    import threading

    from forensics.capture.signs import SignWatch, follow

    log_file = tmp_path / "engine.log"
    log_file.write_text("[2026-06-18 21:00:00] started\n")
    plan = Plan(tmp_path / "captures", titles=["^no-such-process$"], rounds=1, scrapes=1, journal=tmp_path)
    said = io.StringIO()
    found: list[list[Path]] = []
    watcher = threading.Thread(target=lambda: found.append(follow(SignWatch(
        plan, log_file, log=said, hosts=[("node-a", plan), ("node-b", plan)], ssh_config=ssh_config))), daemon=True)
    watcher.start()
    time.sleep(3)  # both followers connected
    with open(log_file, "a") as out:
        out.write("NVRM: Xid (PCI:0000:3b:00): 79, pid=2155, name=python3, GPU has fallen off the bus.\n")
    watcher.join(timeout=120)
    (bundle,) = found[0]
    assert sorted(p.name for p in bundle.iterdir() if p.is_dir()) == ["node-a", "node-b"]
    sign = (bundle / "sign.txt").read_text()
    assert "\tgpu_xid_error\tdevice fault\tNVRM: Xid" in sign and sign.split("\t")[1] in ("node-a", "node-b")
    assert "collecting every host" in said.getvalue()
