"""`forensics watch` against the real lab: an SGLang-shaped endpoint that works, then stalls with
requests pending while 8 real ranks hang; the watchdog notices within the configured time plus
one poll, captures two rounds of stacks and posts to a webhook on loopback."""

from __future__ import annotations

import io
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

from forensics.capture.plan import Plan
from forensics.lab.sglang_metrics import SGLangMetrics
from forensics.lab.tp_desync import TpDesyncLab
from forensics.capture.watch import Watch, watch

AFTER_S, POLL_S = 3.0, 1.0


class _TimedLog(io.StringIO):
    """The watchdog's log, remembering when it first said it saw a hang."""

    noticed: float | None = None

    def write(self, text: str) -> int:
        if self.noticed is None and "made no progress" in text:
            self.noticed = time.monotonic()
        return super().write(text)


class _Hook(BaseHTTPRequestHandler):
    received: ClassVar[list[dict]] = []

    def do_POST(self) -> None:
        self.received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_watch_catches_the_hang_captures_two_rounds_and_posts(tmp_path: Path) -> None:
    metrics = SGLangMetrics("decode")
    server, _, port = metrics.serve()
    hook = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    stalled_at: list[float] = []

    def engine() -> None:  # works for a few polls, then hangs with requests pending
        for _ in range(6):
            metrics.step()
            time.sleep(0.5)
        metrics.stall()
        metrics.step()
        stalled_at.append(time.monotonic())

    try:
        with TpDesyncLab() as lab:
            lab.trigger()
            pids = {role: [r.process.pid for r in lab.ranks if r.role == role] for role in ("prefill", "decode")}
            threading.Thread(target=engine, daemon=True).start()
            log = _TimedLog()
            plan = Plan(tmp_path / "bundles", pids=pids, titles=["^no-such-process$"], rounds=2, round_interval_s=1.0,
                        scrapes=1)
            (bundle,) = watch(Watch([f"decode=127.0.0.1:{port}"], plan, after_s=AFTER_S, poll_s=POLL_S,
                                    webhook=f"http://127.0.0.1:{hook.server_port}/hook", log=log))
            caught = time.monotonic()
    finally:
        server.shutdown()
        hook.shutdown()
    # noticed within the configured time plus one poll (a little for the scrape itself), then captured
    assert log.noticed is not None and log.noticed - stalled_at[0] <= AFTER_S + POLL_S + 0.5
    print(f"hang to noticed {log.noticed - stalled_at[0]:.1f} s, to stacks captured {caught - stalled_at[0]:.1f} s")
    assert sorted(p.name for p in (bundle / "stacks").iterdir()) == ["round-1.txt", "round-2.txt"]
    (posted,) = _Hook.received
    assert posted["bundle"] == str(bundle) and "decode: TP_DESYNC" in posted["verdicts"]
    assert "made no progress for" in log.getvalue() and "captured" in log.getvalue()
