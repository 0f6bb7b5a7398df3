"""Collectives gone wrong for real: gloo ranks on torch (CPU) with the Flight Recorder on, their own
dumps, their own timeout tracebacks; and a process that does not move, dumped by py-spy twice.

The same Flight Recorder dumps go to `torchfrtrace` (torch's own analyser) for comparison; with
torch 2.13 it stops on gloo dumps with a KeyError in `build_collectives`, so what forensics says is
checked against the job's own construction: which rank skipped which collective.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forensics.analyze import analyze
from forensics.lab.collectives import run
from tests.lab.frtrace import check_torchfrtrace, torchfrtrace_text

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def skipped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 ranks; rank 1 never enters the 4th all_reduce."""
    return run(tmp_path_factory.mktemp("skip") / "bundle", ranks=4, odd_rank=1, odd="skip", timeout_s=3)


def test_the_rank_that_skipped_the_collective_is_named_with_its_sequence_number(skipped: Path, tmp_path: Path) -> None:
    analysis = analyze(skipped, tmp_path / "case")
    (verdict,) = [f for f in analysis.findings if f.kind == "collective_verdict"]
    assert "STRAGGLER_OR_MISSING" in verdict.text
    assert "Rank 1 never entered collective 4 (gloo:all_reduce), which ranks 0, 2, 3 entered" in verdict.text
    assert "the last each recorded is rank 1 at 3 (gloo:all_reduce)" in verdict.text
    assert "When the dumps were written, ranks 0, 2, 3 had waited" in verdict.text  # the 3 s timeout, at least
    (timeout,) = [f for f in analysis.findings if f.kind == "collective_timeout"]
    assert "Timed out waiting 3000ms" in timeout.text and "rank 1" not in timeout.text  # the others time out
    assert analysis.incident_found and "symptom: collective_verdict" in analysis.signature()["parts"]
    inputs = {e["path"]: e for e in analysis.timeline.manifest["inputs"]}
    assert all(inputs[f"flight_recorder/nccl_trace_rank_{r}"]["quarantined"] == 0 for r in range(4))


def test_dumps_copied_without_their_times_say_the_wait_is_unknown(skipped: Path, tmp_path: Path) -> None:
    """A dump holds no time of its own; copied without its file time (cp, scp without -p), how long the
    collective had waited is unknown, and the verdict says what would tell: here the ranks' own timeout
    lines are dropped too, so only the recorder speaks."""
    bundle = tmp_path / "bundle"
    shutil.copytree(skipped / "flight_recorder", bundle / "flight_recorder")
    for dump in (bundle / "flight_recorder").iterdir():
        os.utime(dump, ns=(0, 0))
    analysis = analyze(bundle, tmp_path / "case")
    (verdict,) = [f for f in analysis.findings if f.kind == "collective_verdict"]
    assert "Rank 1 never entered collective 4" in verdict.text
    assert "how long the collective had waited is unknown" in verdict.text
    assert "had waited" not in verdict.text.replace("had waited is unknown", "")
    assert any("file time is before its last entry" in n for e in analysis.timeline.manifest["inputs"]
               for n in e.get("notes", []))


def test_torchfrtrace_on_the_same_dumps(skipped: Path) -> None:
    """torch's own analyser, run on the same files: recorded here for the comparison in
    docs/failure-modes.md. If a later torch reads gloo dumps, it must agree on rank 1."""
    check_torchfrtrace(skipped / "flight_recorder", rank=1)


def _pasted(text: str, tmp_path: Path) -> tuple[Path, str]:
    """torchfrtrace's text as a ticket holds it: after the command that made it, nothing else."""
    bundle = tmp_path / "ticket"
    bundle.mkdir()
    paste = "$ torchfrtrace -p nccl_trace_rank_ /tmp/dumps\n" + text
    (bundle / "frtrace.txt").write_text(paste)
    return bundle, paste


def test_torchfrtrace_text_pasted_names_the_same_rank_and_collective(skipped: Path, tmp_path: Path) -> None:
    """torchfrtrace on the repaired dumps says what forensics says of the dumps (rank 1, collective
    4); its text pasted alone gives the same verdict, placed at no time, the prompt line quarantined."""
    text = torchfrtrace_text(skipped / "flight_recorder", tmp_path / "readable")
    assert "Not all ranks joining collective, sequence number: 4" in text and "missing ranks: {1}" in text
    bundle, paste = _pasted(text, tmp_path)
    analysis = analyze(bundle, tmp_path / "case")
    (verdict,) = [f for f in analysis.findings if f.kind == "collective_verdict"]
    assert verdict.at is None and "(pasted; it holds no time): STRAGGLER_OR_MISSING" in verdict.text
    assert "Rank 1 of the expected ranks 0, 1, 2, 3 never joined collective 4 (gloo:all_reduce)" in verdict.text
    assert analysis.incident_found
    (entry,) = analysis.timeline.manifest["inputs"]
    lines = [line for line in paste.splitlines() if line.strip()]
    outside = [line for line in lines if not line.startswith(("Not all", "internal", "group", "collective", "missing",
                                                               "input", "output", "world", "expected", " ", "wrapper",
                                                               "<module>"))]
    assert entry["records"] == 1 + len(outside) and entry["quarantined"] == len(outside)


def test_a_rank_in_another_collective_is_a_desync(tmp_path: Path) -> None:
    bundle = run(tmp_path / "bundle", ranks=3, odd_rank=2, odd="broadcast", timeout_s=3)
    analysis = analyze(bundle, tmp_path / "case")
    (verdict,) = [f for f in analysis.findings if f.kind == "collective_verdict"]
    assert "TP_DESYNC" in verdict.text
    assert "At collective 4 the ranks are in different collectives: ranks 0, 1 in gloo:all_reduce; rank 2 in " \
           "gloo:broadcast" in verdict.text
    text = torchfrtrace_text(bundle / "flight_recorder", tmp_path / "readable")
    assert "Culprit rank 2; Error type: COLLECTIVE_TYPE_MISMATCH" in text
    ticket, _ = _pasted(text, tmp_path)
    (pasted,) = [f for f in analyze(ticket, tmp_path / "ticket-case").findings if f.kind == "collective_verdict"]
    assert "TP_DESYNC. Collective 4 (gloo:all_reduce) has errors; culprit rank 2" in pasted.text


STUCK_PROGRAM = """
import setproctitle, time
setproctitle.setproctitle("sglang::scheduler_TP0")
def synchronize():
    while True: pass  # one line: every dump sees the same line, however the loop is caught
def event_loop_normal():
    synchronize()
event_loop_normal()
"""


@pytest.mark.skipif(shutil.which("py-spy") is None and not (Path(sys.executable).parent / "py-spy").exists(),
                    reason="py-spy not installed")
def test_a_process_whose_stack_never_moves_is_stuck_even_alone(tmp_path: Path) -> None:
    """One process, dumped by py-spy in three rounds: the same `synchronize` frame every time is a
    hang (STUCK), not ordinary work, even with no other rank to compare with."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    process = subprocess.Popen([sys.executable, "-c", STUCK_PROGRAM])
    stacks = tmp_path / "bundle" / "stacks"
    stacks.mkdir(parents=True)
    try:
        time.sleep(1.5)
        for number in (1, 2, 3):
            at = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
            dump = subprocess.run([spy, "dump", "--pid", str(process.pid)], capture_output=True, text=True, timeout=60)
            assert dump.returncode == 0, dump.stderr
            (stacks / f"round-{number}.txt").write_text(f"# capture ts={at} host=h pid={process.pid} group=decode\n"
                                                       + dump.stdout)
            time.sleep(1.1)
    finally:
        process.kill()
        process.wait()
    analysis = analyze(tmp_path / "bundle", tmp_path / "case")
    (stuck,) = [f for f in analysis.findings if f.kind == "stuck_process"]
    assert "showed the same stack in all 3 rounds" in stuck.text and "synchronize" in stuck.text
    assert "A device synchronize waits on the GPU" in stuck.text
    assert analysis.incident_found


def test_watch_captures_from_the_first_timeout_line_stacks_and_flight_recorder(tmp_path: Path) -> None:
    """`watch --follow` on a rank's log as it is written: the gloo timeout line starts the capture,
    which takes two rounds of stacks while the ranks still live, then the Flight Recorder dumps, found
    at the prefix the ranks' own environment names."""
    import io
    import threading

    from forensics.capture.plan import Plan
    from forensics.capture.signs import SignWatch, follow

    bundle = tmp_path / "lab"
    job = threading.Thread(target=run, args=(bundle,), kwargs={"ranks": 3, "odd_rank": 1, "timeout_s": 3,
                                                                "linger_s": 12}, daemon=True)
    job.start()
    log = io.StringIO()
    plan = Plan(tmp_path / "captures", titles=["forensics-collectives-lab"], rounds=2, round_interval_s=1.0,
                scrapes=1, journal=tmp_path)
    (captured,) = follow(SignWatch(plan, bundle / "logs" / "gpu-node-00" / "rank-0.log",
                                   flight_recorder_wait_s=3, log=log))
    job.join(timeout=120)
    said = log.getvalue()
    assert "collective timeout (collective_timeout)" in said and "Timed out waiting 3000ms" in said
    rounds = sorted(p.name for p in (captured / "stacks").iterdir())
    assert rounds == ["round-1.txt", "round-2.txt"]
    assert (captured / "stacks" / "round-1.txt").read_text().count("# capture ts=") == 3  # every rank dumped
    import socket

    dumps = sorted(p.name for p in (captured / "flight_recorder" / socket.gethostname()).iterdir())
    assert dumps == ["nccl_trace_rank_0", "nccl_trace_rank_1", "nccl_trace_rank_2"]


FR_JSON_PROGRAM = """
import sys, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{sys.argv[2]}", rank=0, world_size=1)
t = torch.ones(2)
dist.all_reduce(t)
dist.broadcast(t, 0)
with open(sys.argv[1], "wb") as out:
    out.write(torch._C._distributed_c10d._dump_fr_trace_json())
# gloo's threads torn down before the interpreter's exit: left to it, they abort the process
# now and then ("terminate called without an active exception", seen once in CI)
dist.destroy_process_group()
"""


def test_the_json_form_of_a_real_flight_recorder_dump_is_read(tmp_path: Path) -> None:
    import os
    import socket

    from forensics.sources.flight_recorder import flight_recorder

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dump = tmp_path / "nccl_trace_rank_0.json"
    subprocess.run([sys.executable, "-c", FR_JSON_PROGRAM, str(dump), str(port)], check=True, timeout=120,
                   env={**os.environ, "TORCH_FR_BUFFER_SIZE": "100"})
    assert flight_recorder.sniff(dump.read_bytes()[:4096], dump)
    result = flight_recorder.parse(dump)
    assert (result.records, result.parsed, result.quarantine.height, result.notes) == (2, 2, 0, [])
    rows = result.rows.select("FR_RANK", "FR_SEQ", "FR_OP").rows()
    assert rows == [("0", "1", "gloo:all_reduce"), ("0", "2", "gloo:broadcast")]
