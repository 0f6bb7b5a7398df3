"""A deterministic, seeded writer of SGLang-shaped journald exports, for samples, tests and benchmarks.

It writes what `journalctl -o export` writes for a host running the three units of a
prefill/decode-disaggregated SGLang deployment: schedulers' `Prefill batch` / `Decode batch` lines,
router and uvicorn access lines, and systemd's own messages. The same seed gives the same bytes.
Later stages grow this into the full reference incident; here it provides journal-shaped volume.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
import struct
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

REFERENCE_START = datetime(2026, 6, 18, 21, 20, 0, tzinfo=UTC)

_UNITS = {
    "sglang-dsv4-prefill.service": ("prefill", 30000),
    "sglang-dsv4-decode.service": ("decode", 30002),
    "sglang-dsv4-router.service": ("router", 8000),
}


@dataclass(frozen=True)
class HostPlan:
    """One host's identity in the generated journal."""

    hostname: str
    machine_id: str
    boot_id: str
    seqnum_id: str
    pids: dict[str, int]
    invocations: dict[str, str]


def _hex(rng: random.Random, nbytes: int = 16) -> str:
    return "".join(f"{rng.getrandbits(8):02x}" for _ in range(nbytes))


def host_plan(index: int, seed: int) -> HostPlan:
    """The fixed identity of host number `index` under `seed`."""
    rng = random.Random(f"{seed}/host/{index}")
    return HostPlan(
        hostname=f"gpu-node-{index:02d}",
        machine_id=_hex(rng),
        boot_id=_hex(rng),
        seqnum_id=_hex(rng),
        pids={unit: 4000 + 100 * i + index for i, unit in enumerate(_UNITS)},
        invocations={unit: _hex(rng) for unit in _UNITS},
    )


def _message(rng: random.Random, role: str, tp: int, when: datetime, n: int) -> tuple[str, int]:
    """A log line as SGLang (or its router) prints it, and its syslog priority."""
    stamp = when.strftime("%Y-%m-%d %H:%M:%S")
    if role == "decode":
        running = rng.randint(1, 64)
        return (f"[{stamp} TP{tp}] Decode batch. #running-req: {running}, #token: {running * 900}, "
                f"token usage: {rng.random():.2f}, cuda graph: True, gen throughput (token/s): "
                f"{rng.uniform(200, 900):.2f}, #queue-req: 0, "), 6
    if role == "prefill":
        return (f"[{stamp} TP{tp}] Prefill batch. #new-seq: {rng.randint(1, 8)}, #new-token: "
                f"{rng.randint(64, 8192)}, #cached-token: {rng.randint(0, 4096)}, token usage: "
                f"{rng.random():.2f}, #running-req: {rng.randint(0, 8)}, #queue-req: {rng.randint(0, 4)}, "), 6
    if n % 7 == 0:
        return f'INFO:     127.0.0.1:{rng.randint(30000, 60000)} - "GET /health HTTP/1.1" 200 OK', 6
    # the Rust router's debug line for each request it sends (sgl-router's pd_router.rs), as its
    # Python launcher logs it (sgl-project/sglang#4208)
    return (f"[Router (Rust)] {stamp} - DEBUG - Sending concurrent requests to prefill=http://127.0.0.1:30000 "
            f"decode=http://127.0.0.1:30002"), 7


def entries(count: int, *, hosts: int = 1, seed: int = 0, start: datetime = REFERENCE_START,
            rate_per_s: float = 500.0) -> Iterator[list[tuple[str, bytes]]]:
    """`count` journal entries as ordered (field, value) lists, spread over `hosts` hosts."""
    rng = random.Random(seed)
    plans = [host_plan(h, seed) for h in range(hosts)]
    seqnums = [0] * hosts
    units = list(_UNITS)
    start_us = int(start.timestamp() * 1_000_000)
    step_us = max(1, int(1_000_000 / rate_per_s))
    for n in range(count):
        h = n % hosts
        plan = plans[h]
        seqnums[h] += 1
        unit = units[rng.choices((0, 1, 2), weights=(3, 6, 1))[0]]
        role, _port = _UNITS[unit]
        tp = rng.randrange(4)
        realtime = start_us + n * step_us // hosts * hosts + rng.randrange(step_us)
        monotonic = 86_400_000_000 + (realtime - start_us)
        when = datetime.fromtimestamp(realtime / 1_000_000, tz=UTC)
        message, priority = _message(rng, role, tp, when, n)
        pid = plan.pids[unit] + (tp if role != "router" else 0)
        cursor_hash = int.from_bytes(hashlib.blake2b(f"{plan.seqnum_id}{seqnums[h]}".encode(), digest_size=8).digest())
        # as journald writes it (sd_journal_get_cursor): every number in %llx, no leading zeros
        cursor = (f"s={plan.seqnum_id};i={seqnums[h]:x};b={plan.boot_id};m={monotonic:x};"
                  f"t={realtime:x};x={cursor_hash:x}")
        yield [
            ("__CURSOR", cursor.encode()),
            ("__REALTIME_TIMESTAMP", str(realtime).encode()),
            ("__MONOTONIC_TIMESTAMP", str(monotonic).encode()),
            ("_BOOT_ID", plan.boot_id.encode()),
            ("_TRANSPORT", b"stdout"),
            ("PRIORITY", str(priority).encode()),
            ("SYSLOG_IDENTIFIER", b"python3" if role != "router" else b"sglang-router"),
            ("_PID", str(pid).encode()),
            ("_COMM", b"python3" if role != "router" else b"sglang-router"),
            ("_SYSTEMD_UNIT", unit.encode()),
            ("_SYSTEMD_INVOCATION_ID", plan.invocations[unit].encode()),
            ("_HOSTNAME", plan.hostname.encode()),
            ("MESSAGE", message.encode()),
        ]


_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")


def _printable(value: bytes) -> bool:
    """Whether journalctl would write the value as text (UTF-8 without control characters)."""
    if _CONTROL.search(value):
        return False
    if value.isascii():
        return True
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def export_fields(fields: list[tuple[str, bytes]]) -> bytes:
    """Fields in Journal Export Format (no closing blank line), binary-encoding values that need it."""
    parts = []
    for name, value in fields:
        if _printable(value):
            parts.append(b"%s=%s\n" % (name.encode(), value))
        else:
            parts.append(b"%s\n%s%s\n" % (name.encode(), struct.pack("<Q", len(value)), value))
    return b"".join(parts)


def write_export_entry(out: BinaryIO, fields: list[tuple[str, bytes]]) -> None:
    """Write one entry in Journal Export Format, binary-encoding values that need it."""
    out.write(export_fields(fields) + b"\n")


def write_export(path: Path, count: int, *, hosts: int = 1, seed: int = 0) -> Path:
    """Write `count` generated entries as an export file at `path`."""
    with open(path, "wb", buffering=1 << 20) as out:
        for fields in entries(count, hosts=hosts, seed=seed):
            write_export_entry(out, fields)
    return path


_PYSPY_FRAMES = [
    ("all_reduce", "torch/distributed/distributed_c10d.py"), ("broadcast", "torch/distributed/distributed_c10d.py"),
    ("_exception_logger.<locals>.wrapper", "torch/distributed/c10d_logger.py"),
    ("Scheduler.run_batch", "sglang/srt/managers/scheduler.py"),
    ("Scheduler.recv_requests", "sglang/srt/managers/scheduler.py"),
    ("Scheduler.on_idle", "sglang/srt/disaggregation/decode.py"),
    ("DeepseekV2Model.forward", "sglang/srt/models/deepseek_v2.py"),
    ("Module._call_impl", "torch/nn/modules/module.py"), ("Thread.wait", "threading.py"),
    ("Condition.wait", "threading.py"), ("poll", "sglang/srt/disaggregation/mooncake/conn.py"),
    ("pthread_cond_timedwait", "libc.so.6"),
]


def pyspy_threads(rng: random.Random, pid: int, threads: int, frames: int) -> list[dict]:
    """One process's threads shaped as `py-spy dump --json` writes them (innermost frame first)."""
    out = []
    for t in range(threads):
        stack = []
        for _ in range(frames):
            name, file = rng.choice(_PYSPY_FRAMES)
            native = file.endswith(".so.6")
            stack.append({"name": name, "filename": f"/opt/venv/lib/python3.11/site-packages/{file}",
                          "module": None, "short_filename": file, "line": 0 if native else rng.randint(1, 4000),
                          "locals": None, "is_entry": False, "is_shim_entry": False})
        out.append({"pid": pid, "thread_id": 0x7F0000000000 + t * 0x1000,
                    "thread_name": "MainThread" if t == 0 else (f"worker-{t}" if t % 3 else None),
                    "os_thread_id": pid + t, "active": t % 5 == 0, "owns_gil": t == 0, "frames": stack,
                    "process_info": None})
    return out


def pyspy_text(threads: list[dict], title: str, python: str = "3.11.7") -> str:
    """The same threads as `py-spy dump` prints them."""
    pid = threads[0]["pid"]
    lines = [f"Process {pid}: {title}", f"Python v{python} (/usr/bin/python3.11)", ""]
    for t in threads:
        status = "idle" if not t["active"] else ("active+gil" if t["owns_gil"] else "active")
        name = f': "{t["thread_name"]}"' if t["thread_name"] else ""
        lines.append(f"Thread {t['os_thread_id']} ({status}){name}")
        for f in t["frames"]:
            where = f"{f['short_filename']}:{f['line']}" if f["line"] else f["short_filename"]
            lines.append(f"    {f['name']} ({where})")
    return "\n".join(lines) + "\n"


def write_pyspy_dumps(text_path: Path, json_path: Path, count: int, *, threads: int = 64, frames: int = 40,
                      seed: int = 0) -> int:
    """Write `count` dumps of 8-rank rounds, each after a capture header, in both py-spy forms;
    returns the number of frames written."""
    rng = random.Random(seed)
    total = 0
    with open(text_path, "w") as text_out, open(json_path, "w") as json_out:
        for n in range(count):
            pid, tp = 5000 + n % 8, n % 4
            header = (f"# capture ts={REFERENCE_START.isoformat().replace('+00:00', 'Z')} host=gpu-node-00 "
                      f"pid={pid} group={'prefill' if n % 8 < 4 else 'decode'} title=sglang::scheduler_TP{tp}\n")
            dump = pyspy_threads(rng, pid, threads, frames)
            total += threads * frames
            text_out.write(header + pyspy_text(dump, f"sglang::scheduler_TP{tp}"))
            json_out.write(header + json.dumps(dump, indent=2) + "\n")
    return total


def sparse_tarball(folder: Path) -> Path:
    """`folder/sparse.tar.gz`: a bundle holding a one-line log and a sparse 40 GB file (GNU tar and
    truncate), a few KiB packed: the shape of an archive that must not be unpacked whole."""
    source = folder / "sparse-src" / "bundle" / "logs"
    source.mkdir(parents=True)
    (source / "server.log").write_text("[2026-06-18 21:00:00] hello\n")
    subprocess.run(["truncate", "-s", "40G", str(source / "huge.log")], check=True)
    tarball = folder / "sparse.tar.gz"
    subprocess.run(["tar", "-S", "-czf", str(tarball), "-C", str(folder / "sparse-src"), "bundle"], check=True)
    shutil.rmtree(folder / "sparse-src")
    return tarball
