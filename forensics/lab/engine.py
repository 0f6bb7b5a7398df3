"""One scheduler rank of the lab: a torch.distributed (gloo) process shaped like an SGLang scheduler.

Run as `python -m forensics.lab.engine --role decode --rank 3 --world 4 --port 29511 --control DIR`.
The process titles itself `sglang::scheduler_TP<rank>` and runs the event loop SGLang runs for its
role: `event_loop_overlap_disagg_decode` or `event_loop_normal_disagg_prefill`. Every iteration,
rank 0 shares the incoming requests with the other ranks (`recv_requests`, a broadcast); a batch
runs a tensor-parallel step that ends in `all_reduce`; no work means `on_idle`.

The trigger is a file `trigger` in the control folder. When rank 0 of the decode engine sees it,
it sends the ranks a batch flagged as aborted by a KV-transfer cascade. Ranks 0-2 run it and
enter `all_reduce`; rank 3 takes the abort path into `on_idle`, waiting for transfers that never
drain: the collective never completes, a real hang. The prefill engine stops receiving work and
idles. Each rank writes `ready-<role>-<rank>` after its first batches, and its pid file.

With the Flight Recorder on (`TORCH_FR_BUFFER_SIZE` in the environment), a file `dump-fr` in the
control folder makes every rank write its recorder's dump, as torch's own
`_dump_fr_trace()` gives it (without the C++ stack traces: see `dump_recorder_on_request`), to
`fr/<role>/nccl_trace_rank_<rank>` there: a thread beside the event loop does it, so the ranks
blocked in the collective dump too (gloo waits without the GIL).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import threading
import time
from datetime import timedelta
from pathlib import Path

import setproctitle
import torch
import torch.distributed as dist

PR_SET_PDEATHSIG = 1
IDLE_SLEEP_S = 0.05


def die_with_parent() -> None:
    """Ask the kernel to kill this process when the lab that started it dies (Linux prctl)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class Scheduler:
    """The parts of an SGLang scheduler the wedge needs, under SGLang's names."""

    def __init__(self, role: str, rank: int, world: int, control: Path) -> None:
        self.role, self.rank, self.world, self.control = role, rank, world, control
        self.weight = torch.ones(64, 64)
        self.batches = 0
        self.pending_aborts = 0

    def recv_requests(self) -> dict:
        """Rank 0 decides what arrived and shares it with the other ranks."""
        payload: list[dict | None] = [None]
        if self.rank == 0:
            triggered = (self.control / "trigger").exists()
            if self.role == "decode":
                payload = [{"reqs": 1, "abort_cascade": triggered}]
            else:
                payload = [{"reqs": 0 if triggered else 1, "abort_cascade": False}]
        dist.broadcast_object_list(payload, src=0)
        assert payload[0] is not None  # rank 0 always sends a payload
        return payload[0]

    def run_batch(self, batch: dict) -> torch.Tensor:
        """One tensor-parallel step: a local matmul, then the all-reduce every TP layer ends with."""
        hidden = torch.ones(8, 64) @ self.weight
        dist.all_reduce(hidden)
        return hidden

    def process_batch_result_disagg_decode(self, result: torch.Tensor) -> None:
        """Count the batch; the lab has no tokens to stream."""
        self.batches += 1
        self._mark_ready()

    def process_batch_result_disagg_prefill(self, result: torch.Tensor) -> None:
        """Count the batch; the lab has no KV cache to send."""
        self.batches += 1
        self._mark_ready()

    def on_idle(self) -> None:
        """Wait for work, or for aborted KV transfers to drain (they never do once desynced)."""
        time.sleep(IDLE_SLEEP_S)
        while self.pending_aborts:
            time.sleep(IDLE_SLEEP_S)

    def _mark_ready(self) -> None:
        if self.batches == 3:
            (self.control / f"ready-{self.role}-{self.rank}").touch()

    def event_loop_overlap_disagg_decode(self) -> None:
        """The decode engine's loop."""
        while True:
            batch = self.recv_requests()
            if batch["abort_cascade"] and self.rank == self.world - 1:
                # The desync: this rank's view of the aborted requests leaves it with no batch.
                self.pending_aborts = 1
            if batch["reqs"] and not self.pending_aborts:
                result = self.run_batch(batch)
                self.process_batch_result_disagg_decode(result)
            else:
                self.on_idle()

    def event_loop_normal_disagg_prefill(self) -> None:
        """The prefill engine's loop."""
        while True:
            batch = self.recv_requests()
            if batch["reqs"]:
                result = self.run_batch(batch)
                self.process_batch_result_disagg_prefill(result)
            else:
                self.on_idle()


def dump_recorder_on_request(role: str, rank: int, control: Path) -> None:
    """Wait for `dump-fr` in the control folder, then write this rank's Flight Recorder dump once."""
    while not (control / "dump-fr").exists():
        time.sleep(0.1)
    out = control / "fr" / role / f"nccl_trace_rank_{rank}"
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    # Without stack traces: symbolising every entry's C++ stack took 1.5 s of CPU per rank here (0.03 s
    # without), eight ranks at once, while the idle prefill group must keep passing its broadcasts. In a
    # loaded CI run the prefill ranks were seen waiting 12 s in a broadcast when dumped, most likely a
    # wait the dumps' own work made; without the traces it has not recurred under load. The lab's
    # verdicts never read the frames.
    partial.write_bytes(torch._C._distributed_c10d._dump_fr_trace(includeStackTraces=False))
    partial.rename(out)  # the lab waits for the final name: never a half-written dump


def main() -> None:
    """Start one rank and run its event loop until killed."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--role", choices=["prefill", "decode"], required=True)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, default=4)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--control", type=Path, required=True)
    args = parser.parse_args()
    die_with_parent()
    setproctitle.setproctitle(f"sglang::scheduler_TP{args.rank}")
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port))
    dist.init_process_group("gloo", rank=args.rank, world_size=args.world, timeout=timedelta(hours=1))
    scheduler = Scheduler(args.role, args.rank, args.world, args.control)
    if os.environ.get("TORCH_FR_BUFFER_SIZE"):
        threading.Thread(target=dump_recorder_on_request, args=(args.role, args.rank, args.control),
                         daemon=True).start()
    if args.role == "decode":
        scheduler.event_loop_overlap_disagg_decode()
    else:
        scheduler.event_loop_normal_disagg_prefill()


if __name__ == "__main__":
    main()
