"""How soon `forensics watch` has the stacks after the first sign of trouble, two ways:

- metrics: the real lab (8 torch ranks in a TP desync) behind an SGLang-shaped /metrics endpoint
  that stops counting tokens with requests pending (`watch --metrics`);
- logs: a real gloo job whose rank times out (`forensics.lab.collectives`), its stderr followed as
  it is written (`watch --follow`): from the timeout line's own stamp to both rounds of stacks and
  the Flight Recorder dumps.

Printed beside the reference incident's annotations (a person noticed 3m43s after the freeze and
took stacks at 5m33s): a story's numbers, not a measurement, so no ratio is drawn from them."""

from __future__ import annotations

import io
import tempfile
import threading
import time
from pathlib import Path

from forensics.capture.plan import Plan
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


def seconds_after_stall(log: _Log, stalled: list[float], captured: float) -> tuple[float, float]:
    """(seconds from the stall to the watch saying it made no progress, to both rounds of stacks).
    A run whose engine never stalled, or whose watch never said so, measured nothing: it fails."""
    if not stalled:
        raise RuntimeError("the engine never stalled: the capture was not started by the sign measured")
    if log.noticed is None:
        raise RuntimeError("the watch never logged 'made no progress': the capture was not started by the sign "
                           "measured, so there is no time to notice")
    return log.noticed - stalled[0], captured - stalled[0]


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
    noticed, stacks = seconds_after_stall(log, stalled, captured)
    sign_seen, sign_stacks, dumps = _from_the_logs()
    print(f"\n## watch_capture (--after {AFTER_S:g} s, --poll {POLL_S:g} s, two rounds 2 s apart)\n")
    print("| first sign | seconds to notice | seconds to both rounds of stacks | the reference story's annotations "
          "(not measured) |\n|---|---:|---:|---|")
    print(f"| metrics: progress flat with requests pending (TP-desync lab) | {noticed:.1f} | {stacks:.1f} | "
          f"noticed {PERSON_NOTICED_S:.0f} s, stacks {PERSON_STACKS_S:.0f} s after the freeze |")
    print(f"| logs: a gloo collective timeout line (collectives lab, `--follow`) | {sign_seen:.1f} | {sign_stacks:.1f} | "
          f"— ({dumps} Flight Recorder dumps taken) |")
    print(f"\nbound: noticed within --after + --poll ({AFTER_S + POLL_S:g} s): "
          f"{'met' if noticed <= AFTER_S + POLL_S + 0.5 else 'NOT met'}")


def _from_the_logs() -> tuple[float, float, int]:
    """(seconds from the timeout line's own stamp to the watch seeing it, to the last round of stacks,
    Flight Recorder dumps taken) for the collectives lab followed by `watch --follow`."""
    from datetime import datetime

    from forensics.capture.signs import SignWatch, follow
    from forensics.lab.collectives import run

    with tempfile.TemporaryDirectory() as out:
        lab = Path(out) / "lab"
        job = threading.Thread(target=run, args=(lab,), kwargs={"ranks": 3, "timeout_s": 3, "linger_s": 15},
                               daemon=True)
        job.start()
        (bundle,) = follow(SignWatch(Plan(Path(out) / "captures", titles=["forensics-collectives-lab"], rounds=2,
                                          round_interval_s=2.0, scrapes=1, journal=Path(out)),
                                     lab / "logs" / "gpu-node-00" / "rank-0.log", flight_recorder_wait_s=2,
                                     log=io.StringIO()))
        job.join(timeout=120)
        seen, _, _, line = (bundle / "sign.txt").read_text().rstrip("\n").split("\t", 3)
        written = datetime.fromisoformat(line.split(" ", 1)[0].replace("Z", "+00:00"))
        last_round = max((bundle / "stacks").glob("round-*.txt"), key=lambda p: p.stat().st_mtime)
        stacks_at = datetime.fromtimestamp(last_round.stat().st_mtime, written.tzinfo)
        dumps = sum(1 for _ in (bundle / "flight_recorder").rglob("nccl_trace_rank_*"))
        assert dumps == 3, "the capture did not take every rank's Flight Recorder dump"
        return ((datetime.fromisoformat(seen) - written).total_seconds(), (stacks_at - written).total_seconds(), dumps)


if __name__ == "__main__":
    main()
