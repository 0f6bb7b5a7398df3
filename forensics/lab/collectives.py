"""A collective gone wrong, for real: N gloo ranks (torch, CPU) with the Flight Recorder on, where
one rank skips a collective (or calls another one); the others time out.

    python -m forensics.lab.collectives OUT [--ranks 4] [--odd-rank 1] [--odd skip|broadcast] [--timeout 3]

writes a bundle folder OUT with `flight_recorder/nccl_trace_rank_R` (each rank's own dump, as
`torch._C._distributed_c10d._dump_fr_trace()` writes it, named the way torch names the files it
writes at a watchdog timeout) and `logs/<host>/rank-R.log` (each rank's stderr, every line stamped
as it arrived, as `docker logs -t` gives it: the gloo timeout and its traceback as torch prints
them). Every rank runs the same three all_reduces first; then every rank but the odd one runs a
fourth, which the odd rank skips or meets with a broadcast.

`torchfrtrace` (torch 2.13) cannot read gloo's dumps as written: their `pg_config` names the default
group `""` while their entries name it `"0"`, and `build_collectives` stops with `KeyError: ('0', 0)`.
`readable_by_torchfrtrace` copies them with that one key set as the entries name it, so torch's own
analyser can be compared with forensics on the same collectives.
"""

from __future__ import annotations

import argparse
import os
import pickle
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from datetime import UTC, datetime
from pathlib import Path

from forensics.lab import LabError

RANK_PROGRAM = """# forensics-collectives-lab rank
import datetime, os, sys, time, torch, torch.distributed as dist
rank, world, port, odd_rank, odd, timeout, out, linger, ready = sys.argv[1:10]
rank, world, odd_rank = int(rank), int(world), int(odd_rank)
# every rank has torch loaded before any starts the rendezvous: under load, importing torch can take
# longer than the short collective timeout, which also bounds the rendezvous
open(os.path.join(ready, str(rank)), "w").close()
while len(os.listdir(ready)) < world:
    time.sleep(0.05)
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=float(timeout)))
t = torch.ones(4)
for _ in range(3):
    dist.all_reduce(t)
failed = False
try:
    if rank != odd_rank:
        dist.all_reduce(t)
    elif odd == "broadcast":
        dist.broadcast(t, 0)
    else:
        time.sleep(float(timeout) + 2)
except RuntimeError:
    failed = True
    sys.excepthook(*sys.exc_info())  # the timeout, printed as an uncaught one is (torch adds `[rankN]:`)
    sys.stderr.flush()
with open(os.path.join(out, f"nccl_trace_rank_{rank}"), "wb") as dump:
    dump.write(torch._C._distributed_c10d._dump_fr_trace())
time.sleep(float(linger))  # ranks that stay up a while, as a job's abort handler leaves them: stacks can be taken
sys.exit(1 if failed else 0)
"""



def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stamp(stream: object, log: Path) -> None:
    """Each line of a rank's stderr, stamped as it arrives (what `docker logs -t` writes)."""
    with open(log, "w") as out:
        for raw in iter(stream.readline, b""):  # type: ignore[attr-defined]
            at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            out.write(f"{at} {raw.decode('utf-8', 'replace').rstrip()}\n")
            out.flush()


def run(out: Path, ranks: int = 4, odd_rank: int = 1, odd: str = "skip", timeout_s: float = 3.0,
        host: str = "gpu-node-00", linger_s: float = 0.0) -> Path:
    """Run the job (each rank staying up `linger_s` after its dump); returns the bundle folder."""
    if odd not in ("skip", "broadcast") or not 0 <= odd_rank < ranks:
        raise LabError(f"odd must be skip or broadcast and odd_rank one of 0..{ranks - 1}")
    recorder, logs = out / "flight_recorder", out / "logs" / host
    recorder.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    # the prefix torch writes its watchdog's dumps at, read by the collector from /proc/PID/environ
    env = {**os.environ, "TORCH_FR_BUFFER_SIZE": "2000", "OMP_NUM_THREADS": "1",
           "TORCH_FR_DUMP_TEMP_FILE": str(recorder / "nccl_trace_rank_")}
    started, readers = [], []
    ready = tempfile.mkdtemp(prefix="forensics-lab-ready-")  # outside the bundle: not evidence
    for rank in range(ranks):
        process = subprocess.Popen([sys.executable, "-c", RANK_PROGRAM, str(rank), str(ranks), str(port),
                                    str(odd_rank), odd, str(timeout_s), str(recorder), str(linger_s), ready],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        reader = threading.Thread(target=_stamp, args=(process.stderr, logs / f"rank-{rank}.log"), daemon=True)
        reader.start()
        started.append(process)
        readers.append(reader)
    try:
        for process in started:
            process.wait(timeout=timeout_s * 4 + 120 + linger_s)
    except subprocess.TimeoutExpired:
        raise LabError("a rank did not finish in time") from None
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
                process.wait()
        for reader in readers:
            reader.join(timeout=5)
        shutil.rmtree(ready, ignore_errors=True)
    missing = [r for r in range(ranks) if not (recorder / f"nccl_trace_rank_{r}").is_file()]
    if missing:
        raise LabError(f"no Flight Recorder dump from ranks {missing}; see {logs}")
    return out


def readable_by_torchfrtrace(dumps: Path, out: Path) -> Path:
    """Copies of the `nccl_trace_rank_*` files in `dumps` whose `pg_config` names each group as its
    entries do (the one thing torch 2.13's gloo dumps get wrong for `torchfrtrace`); returns `out`.
    The lab's own dumps only: they are read with pickle, which runs what a pickle names."""
    out.mkdir(parents=True, exist_ok=True)
    for path in sorted(dumps.glob("nccl_trace_rank_*")):
        dump = pickle.loads(path.read_bytes())
        configs = dump.get("pg_config", {})
        for entry in dump["entries"]:
            name, desc = entry["process_group"]
            config = configs.get(name) or configs.get("") or {}
            configs[name] = {**config, "name": name, "desc": config.get("desc") or desc}
        configs.pop("", None)
        (out / path.name).write_bytes(pickle.dumps(dump))
    return out


def main(argv: list[str] | None = None) -> int:
    """The command line above."""
    parser = argparse.ArgumentParser(prog="python -m forensics.lab.collectives", description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--odd-rank", type=int, default=1)
    parser.add_argument("--odd", choices=("skip", "broadcast"), default="skip")
    parser.add_argument("--timeout", type=float, default=3.0)
    args = parser.parse_args(argv)
    print(run(args.out, args.ranks, args.odd_rank, args.odd, args.timeout))
    return 0


if __name__ == "__main__":
    sys.exit(main())
