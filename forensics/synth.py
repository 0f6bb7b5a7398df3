"""A deterministic, seeded writer of SGLang-shaped journald exports, for samples, tests and benchmarks.

It writes what `journalctl -o export` writes for a host running the three units of a
prefill/decode-disaggregated SGLang deployment: schedulers' `Prefill batch` / `Decode batch` lines,
router and uvicorn access lines, and systemd's own messages. The same seed gives the same bytes.
Later stages grow this into the full reference incident; here it provides journal-shaped volume.
"""

from __future__ import annotations

import hashlib
import random
import re
import struct
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
    return (f"[{stamp}] router: request {rng.getrandbits(64):016x} routed to "
            f"http://127.0.0.1:{30000 if n % 2 else 30002} in {rng.uniform(0.1, 4):.2f} ms"), 6


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
        cursor_hash = hashlib.blake2b(f"{plan.seqnum_id}{seqnums[h]}".encode(), digest_size=8).hexdigest()
        cursor = (f"s={plan.seqnum_id};i={seqnums[h]:x};b={plan.boot_id};m={monotonic:x};"
                  f"t={realtime:x};x={cursor_hash}")
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


def write_export_entry(out: BinaryIO, fields: list[tuple[str, bytes]]) -> None:
    """Write one entry in Journal Export Format, binary-encoding values that need it."""
    parts = []
    for name, value in fields:
        if _printable(value):
            parts.append(b"%s=%s\n" % (name.encode(), value))
        else:
            parts.append(b"%s\n%s%s\n" % (name.encode(), struct.pack("<Q", len(value)), value))
    parts.append(b"\n")
    out.write(b"".join(parts))


def write_export(path: Path, count: int, *, hosts: int = 1, seed: int = 0) -> Path:
    """Write `count` generated entries as an export file at `path`."""
    with open(path, "wb", buffering=1 << 20) as out:
        for fields in entries(count, hosts=hosts, seed=seed):
            write_export_entry(out, fields)
    return path
