"""How soon `forensics watch` has the stacks after an engine hangs: the real lab (8 torch ranks in
a TP desync) behind an SGLang-shaped /metrics endpoint that stops counting tokens with requests
pending. Printed beside what the reference incident took a person (3m43s to notice; stacks taken
5m33s after the freeze), the yardstick a watchdog replaces."""

from __future__ import annotations

import io
import tempfile
import threading
import time
from pathlib import Path

from forensics.capture.collect import Plan
from forensics.lab.sglang_metrics import SGLangMetrics
from forensics.lab.tp_desync import TpDesyncLab
from forensics.capture.watch import Watch, watch

AFTER_S, POLL_S = 10.0, 2.0
PERSON_NOTICED_S, PERSON_STACKS_S = 223.0, 333.0  # the reference incident: 21:34:47 → 21:38:30, → 21:40:20


class _Log(io.StringIO):
    noticed: float | None = None

    def write(self, text: str) -> int:
        if self.noticed is None and "made no progress" in text:
            self.noticed = time.monotonic()
        return super().write(text)


def main() -> None:
    metrics = SGLangMetrics("decode")
    server, _, port = metrics.serve()
    stalled: list[float] = []

    def engine() -> None:
        for _ in range(5):
            metrics.step()
            time.sleep(1.0)
        metrics.stall()
        metrics.step()
        stalled.append(time.monotonic())

    try:
        with TpDesyncLab() as lab, tempfile.TemporaryDirectory() as out:
            lab.trigger()
            pids = {role: [r.process.pid for r in lab.ranks if r.role == role] for role in ("prefill", "decode")}
            threading.Thread(target=engine, daemon=True).start()
            log = _Log()
            watch(Watch([f"decode=127.0.0.1:{port}"], Plan(Path(out), pids=pids, titles=["^none$"], rounds=2,
                                                             round_interval_s=2.0, scrapes=1),
                        after_s=AFTER_S, poll_s=POLL_S, log=log))
            captured = time.monotonic()
    finally:
        server.shutdown()
    noticed = (log.noticed or captured) - stalled[0]
    stacks = captured - stalled[0]
    print(f"\n## watch_capture (--after {AFTER_S:g} s, --poll {POLL_S:g} s, two rounds 2 s apart)\n")
    print("| what | seconds after the hang | a person on the reference incident | faster by |\n|---|---:|---:|---:|")
    print(f"| hang noticed | {noticed:.1f} | {PERSON_NOTICED_S:.0f} | {PERSON_NOTICED_S / noticed:.0f}× |")
    print(f"| stacks captured (both rounds) | {stacks:.1f} | {PERSON_STACKS_S:.0f} | {PERSON_STACKS_S / stacks:.0f}× |")
    print(f"\nbound: noticed within --after + --poll ({AFTER_S + POLL_S:g} s): "
          f"{'met' if noticed <= AFTER_S + POLL_S + 0.5 else 'NOT met'}")


if __name__ == "__main__":
    main()
