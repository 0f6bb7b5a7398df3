"""The reference incident, written by a deterministic generator: every source in its real format.

The story (`../shared/DESIGN.md`, from the incident write-up), true UTC on 2026-06-18:

- 21:20:00  window opens; host gpu-node-00 runs sglang-dsv4-prefill (TP4, :30000),
            sglang-dsv4-decode (TP4, :30002) and sglang-dsv4-router (:8000)
- 21:24-21:33 tool-call markup (`<｜DSML｜invoke name=…>`) leaks into assistant text under load;
            21:31:00 a user reports it (annotation); it happens again after the restart
- 21:34:31  a client cancels a batch of in-flight requests; KV-transfer aborts cascade
- 21:34:47  decode's last `Decode batch` line: decode is frozen (requests still running)
- 21:38:30  on-call starts investigating (annotation)
- 21:39:07  prefill's last `Prefill batch` line (its KV queue to decode is full)
- 21:40:10, 21:40:20 py-spy dumps of all 8 schedulers (the lab's real captures)
- health checks answer 200 and the units stay active the whole time
- 21:40:45  `systemctl restart sglang-dsv4-prefill sglang-dsv4-decode` (sudo, then systemd's
            stopping/stopped/starting/started messages)
- 21:41:58  both engines "fired up and ready to roll"; 21:42:00 first health 200 again
- 21:45:00  window closes

Written: `journal/<host>.export.zst` (journalctl -o export), optionally `.json` and a real
`.journal` through systemd-journal-remote; `metrics/<port>/scrapes.prom.gz` (prometheus_client's
rendering every 10 s, each after a capture header, nothing while the engines restart);
`stacks/round-N.txt` (the lab's dumps); `incident.toml`. The same story can be written bigger
(`scale`: more request traffic), on more hosts (the others healthy), in a host time zone other
than UTC, and with a host clock off by a known number of seconds.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import random
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from typing import BinaryIO
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from zoneinfo import ZoneInfo

import zstandard

from forensics.lab.synth import export_fields

DAY = datetime(2026, 6, 18, tzinfo=UTC)
LAB_DUMPS = Path(__file__).resolve().parents[2] / "data" / "lab" / "tp-desync"
JOURNAL_REMOTE = "/lib/systemd/systemd-journal-remote"
MODEL = "deepseek-ai/DeepSeek-V4-Flash"

# systemd's catalog message ids (src/systemd/sd-messages.h)
STARTING, STARTED = "7d4958e842da4a758f6c1cdc7b36dcc5", "39f53479d3a045ac8e11786248231fbf"
STOPPING, STOPPED = "de5b426a63be47a7b6ac3eaac82e2f6f", "9d1aaa27d60140bd96365438aad20286"
SUCCESS = "7ad2d189f7e94e70a38c781354912448"


def at(hms: str) -> datetime:
    """A time of the incident day, UTC."""
    h, m, s = (float(x) for x in hms.split(":"))
    return DAY + timedelta(hours=h, minutes=m, seconds=s)


class Story:
    """The key times of the reference incident (true UTC)."""

    start = at("21:20:00")
    end = at("21:45:00")
    cancel = at("21:34:31")
    decode_last = at("21:34:47")
    prefill_last = at("21:39:07")
    investigating = at("21:38:30")
    leak_report = at("21:31:00")
    restart = at("21:40:45")
    stopped = at("21:40:47")
    ready = at("21:41:58")
    healthy = at("21:42:00")
    leaks = tuple(at(t) for t in ("21:24:10", "21:26:40", "21:29:05", "21:31:55", "21:33:20", "21:43:10"))
    dumps = (at("21:40:10"), at("21:40:20"))


STORY = Story()
UNITS = {"prefill": "sglang-dsv4-prefill.service", "decode": "sglang-dsv4-decode.service",
         "router": "sglang-dsv4-router.service"}
PORTS = {"prefill": 30000, "decode": 30002, "router": 8000}


@dataclass
class Host:
    """One host's identity and clock."""

    name: str
    tz: ZoneInfo
    skew: timedelta  # host clock minus true time
    incident: bool  # the host where the wedge happens (the others stay healthy)
    rng: random.Random
    boot_id: str = ""
    machine_id: str = ""
    seqnum_id: str = ""
    invocations: dict[str, str] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)

    def hex(self, nbytes: int = 16) -> str:
        return "".join(f"{self.rng.getrandbits(8):02x}" for _ in range(nbytes))


def _local(host: Host, when: datetime, millis: bool = False) -> str:
    """A time as SGLang prints it: the host's clock, its local zone, no zone written."""
    local = (when + host.skew).astimezone(host.tz)
    return local.strftime("%Y-%m-%d %H:%M:%S") + (f".{local.microsecond // 1000:03d}" if millis else "")


class Journal:
    """Entries of one host, in the fields journald writes, kept sorted by time when written.
    Each entry is kept as its export bytes (about 500 bytes, not a list of Python strings), so a
    10 M-entry story fits in memory."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.entries: list[tuple[datetime, bytes]] = []

    def add(self, when: datetime, message: str, *, unit: str | None, pid: int, ident: str, priority: int = 6,
            transport: str = "stdout", extra: tuple[tuple[str, str], ...] = ()) -> None:
        fields = [("_TRANSPORT", transport), ("PRIORITY", str(priority)), ("SYSLOG_IDENTIFIER", ident),
                  ("_PID", str(pid)), ("_COMM", ident if ident != "python3" else "python3")]
        if unit is not None:
            fields += [("_SYSTEMD_UNIT", unit), ("_SYSTEMD_INVOCATION_ID", self.host.invocations[unit])]
        else:
            fields += [("_SYSTEMD_UNIT", "init.scope" if pid == 1 else "session-4.scope")]
        fields += [("_HOSTNAME", self.host.name), *extra, ("MESSAGE", message)]
        self.entries.append((when, export_fields([(k, v.encode()) for k, v in fields]) + b"\n"))

    def write(self, out: BinaryIO) -> None:
        """The entries as `journalctl -o export` writes them, with cursors and both clocks, in time order."""
        host = self.host
        boot_us = int((STORY.start - timedelta(days=2)).timestamp() * 1_000_000)
        fixed = [("_BOOT_ID", host.boot_id.encode()), ("_MACHINE_ID", host.machine_id.encode())]
        batch: list[bytes] = []
        for seqnum, (when, body) in enumerate(sorted(self.entries, key=lambda e: e[0]), start=1):
            realtime = int((when + host.skew).timestamp() * 1_000_000)
            monotonic = realtime - boot_us
            digest = int.from_bytes(hashlib.blake2b(f"{host.seqnum_id}{seqnum}".encode(), digest_size=8).digest())
            # as journald writes it (sd_journal_get_cursor): every number in %llx, no leading zeros
            cursor = (f"s={host.seqnum_id};i={seqnum:x};b={host.boot_id};m={monotonic:x};t={realtime:x};"
                      f"x={digest:x}")
            batch.append(export_fields([("__CURSOR", cursor.encode()), ("__REALTIME_TIMESTAMP", str(realtime).encode()),
                                        ("__MONOTONIC_TIMESTAMP", str(monotonic).encode()), *fixed]))
            batch.append(body)
            if len(batch) >= 8192:
                out.write(b"".join(batch))
                batch.clear()
        out.write(b"".join(batch))


def _ticks(start: datetime, end: datetime, every: float, jitter: float, rng: random.Random) -> Iterator[datetime]:
    t = start
    while t < end:
        jittered = t + timedelta(seconds=rng.uniform(0, jitter))
        if jittered < end:
            yield jittered
        t += timedelta(seconds=every)


def _engine_lines(j: Journal, role: str, start: datetime, end: datetime, progress_until: datetime | None,
                  scale: int) -> None:
    """An engine's batch lines, TP0-tagged, from `start` until `progress_until` (None: until end)."""
    host, rng = j.host, j.host.rng
    unit, pid = UNITS[role], host.pids[role]
    stop = min(end, progress_until) if progress_until else end
    every = (1.0 if role == "decode" else 0.5) / scale
    inflight = 0
    for t in _ticks(start, stop, every, every / 2, rng):
        stamp = _local(host, t)
        if role == "decode":
            running = rng.randint(8, 14)
            msg = (f"[{stamp} TP0] Decode batch. #running-req: {running}, #token: {running * 1800}, token usage: "
                   f"{rng.uniform(0.3, 0.6):.2f}, cuda graph: True, gen throughput (token/s): {rng.uniform(380, 620):.2f}, "
                   f"#queue-req: {rng.randint(0, 2)}, ")
        else:
            if host.incident and t > STORY.decode_last:
                inflight += 1  # KV caches wait for a decode engine that no longer takes them
            msg = (f"[{stamp} TP0] Prefill batch. #new-seq: {rng.randint(1, 4)}, #new-token: {rng.randint(256, 8192)}, "
                   f"#cached-token: {rng.randint(0, 2048)}, token usage: {rng.uniform(0.1, 0.5):.2f}, #running-req: 0, "
                   f"#queue-req: {rng.randint(0, 3)}, #prealloc-req: 0, #inflight-req: {inflight}, "
                   f"input throughput (token/s): {rng.uniform(2000, 9000):.2f}, ")
        j.add(t, msg, unit=unit, pid=pid, ident="python3")


def _health(j: Journal, role: str, start: datetime, end: datetime) -> None:
    host = j.host
    for t in _ticks(start, end, 5.0, 0.0, host.rng):  # polled every 5 s on the dot
        j.add(t, f'INFO:     127.0.0.1:{host.rng.randint(30000, 60000)} - "GET /health HTTP/1.1" 200 OK',
              unit=UNITS[role], pid=host.pids[role], ident="python3")


def _router_line(host: Host, t: datetime, level: str, text: str) -> str:
    """A line of SGLang's Rust router as its Python launcher logs it (sgl-project/sglang#4208 quotes one)."""
    return f"[Router (Rust)] {_local(host, t)} - {level} - {text}"


def _router(j: Journal, start: datetime, end: datetime, scale: int) -> None:
    """The router at debug level: one line per request it dispatches to a prefill/decode pair (its own
    wording: `debug!("Sending concurrent requests to prefill={} decode={}")`, sgl-router's
    src/routers/http/pd_router.rs), through the wedge too: clients keep sending."""
    host, rng = j.host, j.host.rng
    for t in _ticks(start, end, 0.25 / scale, 0.2 / scale, rng):
        j.add(t, _router_line(host, t, "DEBUG", f"Sending concurrent requests to prefill=http://127.0.0.1:"
                                                f"{PORTS['prefill']} decode=http://127.0.0.1:{PORTS['decode']}"),
              unit=UNITS["router"], pid=host.pids["router"], ident="sglang-router", priority=7)


def _systemd(j: Journal, role: str, when: datetime, message_id: str, text: str, job: tuple[str, str] | None) -> None:
    extra = [("UNIT", UNITS[role]), ("MESSAGE_ID", message_id)]
    if job:
        extra += [("JOB_TYPE", job[0]), ("JOB_RESULT", job[1])]
    j.add(when, text, unit=None, pid=1, ident="systemd", transport="journal", extra=tuple(extra))


def _uuid_hex(drawn: int) -> str:
    """A request id as SGLang makes them (a uuid4's 32 hex digits), from one 64-bit draw."""
    return f"{drawn:016x}{(drawn * 0x9E3779B97F4A7C15) % 2**64:016x}"


def _transfer_failed(role: str, rank: int, drawn: int, room: int) -> str:
    """SGLang's own wording of a failed KV transfer on each side of a PD pair (as in the corpus'
    `sglang_pd_nixl_mooncake_router_smg_kv_transfer_failed_prefill_decode_2026-02-26.log`; the
    f-strings are in sglang/srt/disaggregation/prefill.py and decode.py)."""
    rid = _uuid_hex(drawn)
    if role == "prefill":
        return (f"Prefill transfer failed for request rank={rank} req.rid='{rid}' req.bootstrap_room={room} with "
                f"exception KVTransferError(bootstrap_room={room}): Decode instance could be dead, remote mooncake "
                f"session 127.0.0.1:{16000 + rank} is not alive")
    return (f"Decode transfer failed for request rank={rank} decode_req.req.rid='{rid}' "
            f"decode_req.req.bootstrap_room={room} with exception KVTransferError(bootstrap_room={room}): "
            "Failed to get kvcache from prefill instance, it might be dead")


def _incident(j: Journal, scale: int) -> None:
    """What only the incident host logs: cancellations, aborts, leaks, the restart and recovery."""
    host, rng, s = j.host, j.host.rng, STORY
    for n in range(40):
        # SGLang's engine, when the client's connection drops (the tokenizer manager's ValueError, logged by
        # its HTTP server: sgl-project/sglang#13419 quotes the line)
        t = s.cancel + timedelta(seconds=n * 0.05)
        j.add(t, f"[{_local(host, t)}] [http_server] Error: Request is disconnected from the client side (type 3). "
                 f"Abort request obj.rid='{_uuid_hex(rng.getrandbits(64))}'",
              unit=UNITS["decode"], pid=host.pids["decode"], ident="python3", priority=3)
    for n in range(40):
        room = None
        for role in ("prefill", "decode"):
            t = s.cancel + timedelta(seconds=0.3 + n * 0.38)
            drawn = rng.getrandbits(64)  # one draw per line, as ever: the rest of the story keeps its numbers
            room = room or drawn >> 2  # both sides name the transfer's bootstrap room, as SGLang logs it
            j.add(t, f"[{_local(host, t, millis=True)} TP{n % 4}] {_transfer_failed(role, n % 4, drawn, room)}",
                  unit=UNITS[role], pid=host.pids[role] + n % 4, ident="python3", priority=4)
    for t in s.leaks:
        # the markup in the text a request finished with, as SGLang's request log prints it at
        # --log-requests-level 2 (request_logger.py's `Finish: obj=…, out=…`)
        rid = _uuid_hex(rng.getrandbits(64))
        j.add(t, f"[{_local(host, t)}] Finish: obj={_request_obj(rid, None, text='What is the weather in Paris?')}, "
                 "out={'text': 'Let me check.<｜DSML｜invoke name=\"get_weather\">', 'meta_info': {'id': "
                 f"'{rid}', 'finish_reason': {{'type': 'stop', 'matched': 1}}, 'prompt_tokens': 412, "
                 "'completion_tokens': 23, 'cached_tokens': 384, 'e2e_latency': 1.82}}",
              unit=UNITS["decode"], pid=host.pids["decode"], ident="python3", priority=6)
    j.add(s.restart, "      sre : TTY=pts/0 ; PWD=/home/sre ; USER=root ; COMMAND=/usr/bin/systemctl restart "
                     "sglang-dsv4-prefill sglang-dsv4-decode", unit=None, pid=31337, ident="sudo", transport="syslog",
          priority=5)
    for n, role in enumerate(("prefill", "decode")):
        t0 = s.restart + timedelta(milliseconds=20 + 10 * n)
        _systemd(j, role, t0, STOPPING, f"Stopping {UNITS[role]} - SGLang {role} engine...", None)
        t1 = s.stopped + timedelta(milliseconds=10 * n)
        _systemd(j, role, t1, SUCCESS, f"{UNITS[role]}: Deactivated successfully.", None)
        _systemd(j, role, t1 + timedelta(milliseconds=1), STOPPED, f"Stopped {UNITS[role]} - SGLang {role} engine.",
                 ("stop", "done"))
        _systemd(j, role, t1 + timedelta(milliseconds=5), STARTING, f"Starting {UNITS[role]} - SGLang {role} engine...",
                 None)
        j.host.invocations[UNITS[role]] = j.host.hex()
        j.host.pids[role] += 1000
        _systemd(j, role, t1 + timedelta(milliseconds=8), STARTED, f"Started {UNITS[role]} - SGLang {role} engine.",
                 ("start", "done"))
        for offset, text in ((2, "Load weight begin. avail mem=78.52 GB"), (40, "Load weight end. mem usage=61.20 GB"),
                             (52, "Capture cuda graph begin."), (70, "Capture cuda graph end.")):
            t = t1 + timedelta(seconds=offset)
            j.add(t, f"[{_local(host, t)} TP0] {text}", unit=UNITS[role], pid=host.pids[role], ident="python3")
        j.add(s.ready, f"[{_local(host, s.ready)}] The server is fired up and ready to roll!", unit=UNITS[role],
              pid=host.pids[role], ident="python3")
    for t in _ticks(s.stopped + timedelta(seconds=3), s.healthy, 5.0, 0.0, rng):
        for role in ("prefill", "decode"):
            # the Rust router's own wording, reqwest's error in it (sgl-project/sglang#4208 quotes it)
            url = f"http://127.0.0.1:{PORTS[role]}"
            j.add(t, _router_line(host, t, "INFO", f"Worker {url} health check is pending with error: error sending "
                                                   f"request for url ({url}/health)"),
                  unit=UNITS["router"], pid=host.pids["router"], ident="sglang-router", priority=6)


def _host_journal(host: Host, scale: int) -> Journal:
    j = Journal(host)
    s = STORY
    for unit in UNITS.values():
        host.invocations[unit] = host.hex()
    _router(j, s.start, s.end, scale)
    if not host.incident:
        for role in ("prefill", "decode"):
            _engine_lines(j, role, s.start, s.end, None, scale)
            _health(j, role, s.start, s.end)
        return j
    for role, last in (("decode", s.decode_last), ("prefill", s.prefill_last)):
        _engine_lines(j, role, s.start, s.end, last, scale)
        _health(j, role, s.start, s.restart)
    # the last progress lines land exactly on the story's times
    j.add(s.decode_last, f"[{_local(host, s.decode_last)} TP0] Decode batch. #running-req: 12, #token: 21600, token "
                         "usage: 0.44, cuda graph: True, gen throughput (token/s): 0.00, #queue-req: 3, ",
          unit=UNITS["decode"], pid=host.pids["decode"], ident="python3")
    j.add(s.prefill_last, f"[{_local(host, s.prefill_last)} TP0] Prefill batch. #new-seq: 1, #new-token: 512, "
                          "#cached-token: 0, token usage: 0.49, #running-req: 0, #queue-req: 6, #prealloc-req: 0, "
                          "#inflight-req: 64, input throughput (token/s): 812.40, ",
          unit=UNITS["prefill"], pid=host.pids["prefill"], ident="python3")
    _incident(j, scale)
    for role in ("prefill", "decode"):
        _engine_lines(j, role, s.healthy + timedelta(seconds=0.5), s.end, None, scale)
        _health(j, role, s.healthy, s.end)
    return j


def _scrapes(host: Host, role: str, scrape_s: int = 10) -> bytes:
    """An engine's /metrics every 10 s as prometheus_client renders it, each after a capture header."""
    from prometheus_client import disable_created_metrics, enable_created_metrics

    from forensics.lab.sglang_metrics import SGLangMetrics
    s = STORY
    disable_created_metrics()  # `_created` samples carry the wall clock: they would break determinism
    try:
        engine = SGLangMetrics(role, seed=hash_seed(host.name, role), started_at=(s.start - timedelta(hours=3)).timestamp())
        last = s.decode_last if role == "decode" else s.prefill_last
        out = io.StringIO()
        t = s.start
        restarted = False
        while t <= s.end:
            down = host.incident and s.restart < t < s.healthy
            if host.incident and t > last and not engine.stalled and t < s.restart:
                engine.stall()
            if host.incident and not down and t >= s.healthy and not restarted:
                engine.restart(at=s.stopped.timestamp())
                restarted = True
            if not down:
                engine.step(tokens=1000 if role == "decode" else 4000, running=12 if engine.stalled else 8,
                            queued=6 if engine.stalled else 1)
                stamp = (t + host.skew).isoformat(timespec="milliseconds").replace("+00:00", "Z")
                out.write(f"# capture ts={stamp} host={host.name} port={PORTS[role]}\n")
                out.write(engine.exposition())
            t += timedelta(seconds=scrape_s)
    finally:
        enable_created_metrics()
    return out.getvalue().encode()


def hash_seed(*parts: str) -> int:
    """A stable integer seed from strings (Python's hash() is salted per process)."""
    return int.from_bytes(hashlib.blake2b("/".join(parts).encode(), digest_size=4).digest(), "big")


def _request_obj(rid: str, room: int | None, text: str | None = None) -> str:
    """A GenerateReqInput as SGLang's request log prints it: its fields in the order of the real line
    sgl-project/sglang#25887 quotes; level 0 leaves out the text and sampling parameters, level 2
    (`text` given) prints them."""
    bootstrap = (f"bootstrap_host='127.0.0.1', bootstrap_port=8998, bootstrap_room={room}" if room is not None
                 else "bootstrap_host=None, bootstrap_port=None, bootstrap_room=None")
    shown = (f"text={text!r}, input_ids=None, input_embeds=None, image_data=None, audio_data=None, " if text else "")
    sampling = ("sampling_params={'temperature': 0.6, 'max_new_tokens': 4096, 'top_p': 0.95, 'top_k': -1}, "
                if text else "")
    return (f"GenerateReqInput({shown}rid='{rid}', http_worker_ipc=None, video_data=None, {sampling}return_logprob=False, "
            "logprob_start_len=-1, top_logprobs_num=0, token_ids_logprob=None, return_text_in_logprobs=True, "
            "stream=True, log_metrics=True, return_hidden_states=False, modalities=[], session_params=None, "
            f"lora_id=None, custom_logit_processor=None, {bootstrap}, bootstrap_pair_key=None, decode_tp_size=None, "
            "data_parallel_rank=None, background=False, priority=None, extra_key=None, no_logs=False, "
            "custom_labels=None, return_bytes=False, return_entropy=False)")


def _cross_host(sender: Journal, receiver: Journal) -> None:
    """Requests the incident host's router sends to a prefill/decode pair across two hosts: the next
    host's prefill engine and its own decode engine, at once. Each engine's request log (SGLang's
    `--log-requests`, level 0: request_logger.py's `Receive: obj=…`) names the request by its own rid
    and by the bootstrap room the router gave both, each on its own host's clock, 1-3 ms after the
    send: what lets align estimate a clock offset."""
    rng = random.Random(hash_seed(sender.host.name, receiver.host.name))
    for t in _ticks(STORY.start, STORY.end, 2.0, 0.5, rng):
        room = rng.getrandbits(63)
        for journal, role in ((receiver, "prefill"), (sender, "decode")):
            arrived = t + timedelta(milliseconds=rng.uniform(1, 3))
            journal.add(arrived, f"[{_local(journal.host, arrived, millis=True)}] Receive: obj="
                                 f"{_request_obj(_uuid_hex(rng.getrandbits(64)), room)}",
                        unit=UNITS[role], pid=journal.host.pids[role], ident="python3")


def _manifest(hosts: list[Host], declare_skew: bool) -> str:
    lines = ['title = "DeepSeek-V4-Flash PD wedge: decode TP ranks desynced while health stayed green"',
             f'window = ["{STORY.start.isoformat()}", "{STORY.end.isoformat()}"]', ""]
    for h in hosts:
        lines += [f'[hosts."{h.name}"]', f'time_zone = "{h.tz.key}"']
        if declare_skew or not h.incident:
            lines.append(f"clock_offset_s = {h.skew.total_seconds():g}  # host clock minus true time, measured after")
        lines.append("")
    for role, unit in UNITS.items():
        lines += [f"[components.{role}]", f'units = ["{unit}"]']
        if role != "router":
            lines += [f"ports = [{PORTS[role]}]", 'process_titles = ["sglang::scheduler_TP*"]', f'stacks_group = "{role}"']
        lines.append("")
    for when, text in ((STORY.leak_report, "user reports tool-call markup leaking in assistant text"),
                       (STORY.investigating, "on-call sees decode throughput at zero and starts investigating"),
                       (STORY.restart, "restart issued: systemctl restart sglang-dsv4-prefill sglang-dsv4-decode")):
        lines += ["[[annotations]]", f'at = "{when.isoformat()}"', f'text = "{text}"', ""]
    return "\n".join(lines)


README = """# The reference incident: DeepSeek-V4-Flash, prefill/decode disaggregated, TP-desync wedge (2026-06-18)

Written by `forensics reference data/incidents/dsv4-pd-wedge-2026-06-18` (`forensics/lab/reference.py`,
deterministic: the same bytes every time) from the story in `../shared/DESIGN.md`:

- `journal/gpu-node-00.export.zst`: `journalctl -o export` of the host: the three units' stdout
  (SGLang's `Prefill batch` / `Decode batch` lines, uvicorn health checks, router lines), the mass
  cancellation at 21:34:31 and its KV-transfer aborts, decode's last batch at 21:34:47, prefill's at
  21:39:07, the tool-call markup leaks, sudo's `systemctl restart` at 21:40:45 with systemd's own
  stopping / stopped / starting / started messages, the engines ready at 21:41:58, health 200 again
  at 21:42:00.
- `metrics/gpu-node-00_30000/`, `metrics/gpu-node-00_30002/`: `/metrics` of prefill and decode
  every 10 s as prometheus_client renders the lab's SGLang metrics, each after a capture header;
  nothing while the engines restart.
- `stacks/round-1.txt`, `stacks/round-2.txt`: `py-spy dump` of all 8 schedulers at 21:40:10 and
  21:40:20. Real dumps of real processes: the lab (`python -m forensics.lab.tp_desync OUT --at
  2026-06-18T21:40:10Z --host gpu-node-00 --rounds 2 --interval 10 --format text`, kept in
  `data/lab/tp-desync/`) ran a prefill and a decode engine of four torch.distributed (gloo) ranks
  each and wedged the decode group: ranks 0-2 in `all_reduce`, rank 3 in `on_idle`.
- `incident.toml`: title, window, host time zone and clock offset, components (units, ports,
  process titles), annotations (the user's markup report, the start of the investigation, the
  restart).

`forensics reference OUT --scale 100 --hosts 3 --time-zone Asia/Shanghai --skew-s 7.5` writes the
same story bigger, on more hosts, in another time zone, with a skewed clock.
"""


def write_reference(out: Path, *, scale: int = 1, hosts: int = 1, time_zone: str = "UTC", skew_s: float = 0.0,
                    declare_skew: bool = True, journal_formats: tuple[str, ...] = ("export",),
                    seed: int = 618, scrape_s: int = 10) -> Path:
    """Write the reference incident bundle at `out` (replacing it). `time_zone` and `skew_s` apply to
    the incident host, whose offset incident.toml states unless `declare_skew` is false (the others
    are declared exact). `journal_formats` may add "json" and "journal" (needs systemd-journal-remote);
    `scrape_s` is the metrics' scrape interval (10 s: the bundled reference)."""
    shutil.rmtree(out, ignore_errors=True)
    (out / "journal").mkdir(parents=True)
    machines: list[Host] = []
    waiting: Journal | None = None  # the incident host's journal, until the next host's is made
    # One host at a time (two while the first waits for the second, which it sends requests to), so
    # a fleet of any size is written in the memory of two hosts' journals.
    for n in range(hosts):
        rng = random.Random(f"{seed}/{n}")
        host = Host(f"gpu-node-{n:02d}", ZoneInfo(time_zone if n == 0 else "UTC"),
                    timedelta(seconds=skew_s if n == 0 else 0.0), n == 0, rng)
        host.boot_id, host.machine_id, host.seqnum_id = host.hex(), host.hex(), host.hex()
        host.pids = {"prefill": 4100 + n, "decode": 4200 + n, "router": 4300 + n}
        machines.append(host)
        journal = _host_journal(host, scale)
        if n == 0 and hosts > 1:
            waiting = journal
            continue
        if waiting is not None:
            _cross_host(waiting, journal)
            _write_host(out, waiting, journal_formats, scrape_s)
            waiting = None
        _write_host(out, journal, journal_formats, scrape_s)
    (out / "stacks").mkdir()
    for dump in sorted(LAB_DUMPS.glob("round-*.txt")):
        text = dump.read_text()
        text = re.sub(r"ts=(\S+)", partial(_shifted, shift=machines[0].skew), text)
        (out / "stacks" / dump.name).write_text(text)
    (out / "incident.toml").write_text(_manifest(machines, declare_skew))
    (out / "README.md").write_text(README)
    return out


def _write_host(out: Path, journal: Journal, journal_formats: tuple[str, ...], scrape_s: int = 10) -> None:
    """One host's journal (as export, and JSON or .journal files if asked) and its engines' scrapes."""
    host = journal.host
    with open(out / "journal" / f"{host.name}.export.zst", "wb") as raw, \
            zstandard.ZstdCompressor(level=3).stream_writer(raw) as compressed:  # level 10: 11x the time, 7% smaller
        journal.write(compressed)
    if "json" in journal_formats or "journal" in journal_formats:
        _real_journal(journal, out / "journal", host.name, journal_formats)
    journal.entries.clear()
    for role in ("prefill", "decode"):
        folder = out / "metrics" / f"{host.name}_{PORTS[role]}"
        folder.mkdir(parents=True)
        with gzip.GzipFile(folder / "scrapes.prom.gz", "wb", mtime=0) as f:
            f.write(_scrapes(host, role, scrape_s))


def _shifted(match: re.Match[str], shift: timedelta) -> str:
    """A capture header's `ts=` moved by the host's clock skew (the collector used that clock)."""
    moved = datetime.fromisoformat(match[1]) + shift
    return "ts=" + moved.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _real_journal(journal: Journal, folder: Path, name: str, formats: tuple[str, ...]) -> None:
    """Real journal files from systemd-journal-remote (into a folder: it rotates big outputs), and
    journalctl's JSON of them."""
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "in.export"
        with open(source, "wb") as plain:
            journal.write(plain)
        journals = Path(tmp) / "journal"
        journals.mkdir()
        subprocess.run([JOURNAL_REMOTE, f"--output={journals}/{name}.journal", str(source)], check=True,
                       capture_output=True)
        if "json" in formats:
            as_json = subprocess.run(["journalctl", "-D", str(journals), "-o", "json"], check=True,
                                     capture_output=True).stdout
            (folder / f"{name}.json.zst").write_bytes(zstandard.ZstdCompressor(level=10).compress(as_json))
        if "journal" in formats:
            shutil.copytree(journals, folder / f"{name}.journal.d")
