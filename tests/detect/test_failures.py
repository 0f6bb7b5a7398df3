"""Failure modes beyond the silent hang, each from lines in the shapes the real tools print them
(PyTorch's ProcessGroupNCCL watchdog, the NVIDIA driver, the kernel's OOM killer, systemd, SGLang and
vLLM start-up): the finding, its sentence, and whether it counts as an incident."""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path

import polars as pl
import pytest

from forensics.analyze import Analysis, analyze, is_anomaly
from forensics.detect.failures import raised
from tests.conftest import export_entry

BASE = 1_781_818_000_000_000  # 2026-06-18 21:26:40 UTC, in µs


def _analysis(tmp_path: Path, files: dict[str, bytes | str]) -> Analysis:
    for name, content in files.items():
        path = tmp_path / "bundle" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return analyze(tmp_path / "bundle", tmp_path / "case")


def _found(analysis: Analysis, kind: str) -> list:
    return [f for f in analysis.findings if f.kind == kind]


def _journal(*entries: tuple[int, str, str, str]) -> bytes:
    """Export entries of (seconds after BASE, unit or transport, priority, message)."""
    out = []
    for seconds, where, priority, message in entries:
        fields = [("__REALTIME_TIMESTAMP", str(BASE + seconds * 1_000_000)), ("_HOSTNAME", "gpu-node-00"),
                  ("PRIORITY", priority), ("MESSAGE", message)]
        fields.append(("_TRANSPORT", "kernel") if where == "kernel" else ("_SYSTEMD_UNIT", where))
        out.append(export_entry(*fields))
    return b"".join(out)


# Lines as ProcessGroupNCCL.cpp writes them (the watchdog's messages), torch's `[rankN]:` prefix.
NCCL_WATCHDOG = """\
[rank3]:[E710 18:00:32.421616045 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=59958, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=1800000) ran for 1800077 milliseconds before timing out.
[rank3]:[E710 18:00:32.421779233 ProcessGroupNCCL.cpp:2168] [PG ID 1 PG GUID 1 Rank 3]  failure detected by watchdog at work sequence id: 59958 PG status: last enqueued work: 59958, last completed work: 59957
[rank0]:[E710 18:00:33.100000000 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=59957, OpType=BROADCAST, NumelIn=16, NumelOut=16, Timeout(ms)=1800000) ran for 1800011 milliseconds before timing out.
[rank3]:[F710 18:00:34.000000000 ProcessGroupNCCL.cpp:1746] [PG ID 1 PG GUID 1 Rank 3] Terminating the process after attempting to dump debug info, due to collective timeout or exception.
"""


def test_nccl_watchdog_lines_give_the_collective_in_flight_per_rank(tmp_path: Path) -> None:
    analysis = _analysis(tmp_path, {"logs/gpu-node-00/train.log": NCCL_WATCHDOG})
    (timeout,) = _found(analysis, "collective_timeout")
    assert "rank 3 (PG 1) in ALLREDUCE seq 59958, ran 1800 s of its 1800 s timeout; last enqueued 59958, " \
           "last completed 59957" in timeout.text
    assert "rank 0 in BROADCAST seq 59957" in timeout.text and "a desync" in timeout.text
    assert timeout.at.strftime("%m-%d %H:%M:%S") == "07-10 18:00:32"  # glog's month without its zero
    (abort,) = _found(analysis, "process_group_abort")
    assert "Terminating the process after attempting to dump debug info" in abort.text
    assert analysis.incident_found and "symptom: collective_timeout" in analysis.signature()["parts"]


def test_xid_codes_say_what_they_mean_and_the_oom_killer_names_its_victim(tmp_path: Path) -> None:
    journal = _journal(
        (10, "kernel", "4", "NVRM: Xid (PCI:0000:3b:00): 79, pid=2155, name=python3, GPU has fallen off the bus."),
        (12, "kernel", "3", "Out of memory: Killed process 2155 (python3) total-vm:98765432kB, anon-rss:81234567kB, "
                            "file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:160000kB oom_score_adj:0"),
        (13, "sglang-decode.service", "6", "[2026-06-18 21:26:53 TP0] Decode batch. #running-req: 1, #queue-req: 0"))
    analysis = _analysis(tmp_path, {"journal/host.export": journal})
    (xid,) = _found(analysis, "gpu_xid_error")
    assert "Xid 79 (PCI:0000:3b:00, pid 2155, python3): GPU has fallen off the bus" in xid.text
    (oom,) = _found(analysis, "oom_kill")
    assert "killed python3 (pid 2155)" in oom.text
    assert analysis.incident_found


def test_a_crash_loop_says_its_counter_and_how_often(tmp_path: Path) -> None:
    journal = _journal(*[(30 * n, "sglang-decode.service", "6",
                          f"sglang-decode.service: Scheduled restart job, restart counter is at {n}.") for n in (1, 2, 3)])
    analysis = _analysis(tmp_path, {"journal/host.export": journal})
    (loop,) = _found(analysis, "crash_loop")
    assert "restart counter at 3" in loop.text and "one restart every 30 s over the 3 restarts" in loop.text


def test_a_crash_loop_gives_the_first_error_of_each_start(tmp_path: Path) -> None:
    """Each start of the unit logs its traceback's last line on stderr (priority 3) and dies;
    systemd schedules the restart. The finding counts the same first error across starts."""
    unit = "sglang-decode.service"
    entries = []
    for n, error in enumerate(["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"] * 3
                              + ["RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275"]):
        entries += [(30 * n + 5, unit, "6", "[2026-06-18 21:27:00 TP0] Load weight begin. avail mem=78.50 GB"),
                    (30 * n + 9, unit, "3", error),
                    (30 * n + 10, unit, "3", "RuntimeError: a second error of the same start, not its first"),
                    (30 * n + 20, unit, "6", f"{unit}: Scheduled restart job, restart counter is at {n + 1}.")]
    analysis = _analysis(tmp_path, {"journal/host.export": _journal(*entries)})
    (loop,) = _found(analysis, "crash_loop")
    assert ("First error of each start: “torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB” "
            "(3 of 4 starts); “RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275” "
            "(1 of 4 starts).") in loop.text
    assert "a second error of the same start" not in loop.text


def test_a_crash_loop_with_no_error_lines_says_where_to_look(tmp_path: Path) -> None:
    journal = _journal(*[(30 * n, "sglang-decode.service", "6",
                          f"sglang-decode.service: Scheduled restart job, restart counter is at {n}.") for n in (1, 2)])
    (loop,) = _found(_analysis(tmp_path, {"journal/host.export": journal}), "crash_loop")
    assert "No start logged an error line before it died" in loop.text


SGLANG_START = """\
[2026-06-18 21:50:01] server_args=ServerArgs(model_path='deepseek-ai/DeepSeek-V3', tp_size=8)
[2026-06-18 21:50:40 TP0] Init torch distributed begin.
[2026-06-18 21:50:41 TP0] Init torch distributed ends. mem usage=0.00 GB
[2026-06-18 21:50:42 TP0] Load weight begin. avail mem=78.50 GB
[2026-06-18 21:51:10 TP0] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=40.10 GB
[2026-06-18 21:51:16 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=39.00 GB
"""


def test_a_start_up_log_that_just_ends_is_a_silent_death(tmp_path: Path) -> None:
    analysis = _analysis(tmp_path, {"logs/gpu-node-00/decode.log": SGLANG_START})
    (death,) = _found(analysis, "silent_death")
    assert death.text.startswith("the log of decode ends at 21:51:16 during start-up (“[2026-06-18 21:51:16 TP0] "
                                 "Capture cuda graph begin.")
    assert "no error and no shutdown line" in death.text and "OOM killer or an Xid" in death.text
    assert analysis.incident_found


def test_a_start_up_that_errs_is_a_start_up_failure_not_a_silent_death(tmp_path: Path) -> None:
    failed = SGLANG_START + "[2026-06-18 21:51:20 TP0] Scheduler hit an exception: RuntimeError: CUDA error: out of memory\n"
    analysis = _analysis(tmp_path, {"logs/gpu-node-00/decode.log": failed})
    assert _found(analysis, "silent_death") == []
    assert _found(analysis, "cuda_error") or _found(analysis, "cuda_oom")
    (failure,) = _found(analysis, "startup_failure")
    assert "first error at 21:51:20" in failure.text


def test_a_server_that_came_up_and_whose_log_ends_is_no_death(tmp_path: Path) -> None:
    ready = SGLANG_START + ("[2026-06-18 21:52:00] The server is fired up and ready to roll!\n"
                            "[2026-06-18 21:52:05 TP0] Decode batch. #running-req: 1, #token: 90, #queue-req: 0, \n")
    analysis = _analysis(tmp_path, {"logs/gpu-node-00/decode.log": ready})
    assert not [f for f in analysis.findings if f.kind.startswith(("silent", "startup"))]
    assert not analysis.incident_found


def test_what_follows_an_operators_stop_is_its_consequence_and_what_precedes_it_is_not(tmp_path: Path) -> None:
    log = ("[2026-06-18 21:40:00] ERROR: KV transfer backend lost its peer\n"
           "[2026-06-18 21:45:00] SIGTERM received. signum=None frame=None. Draining requests and shutting down...\n"
           "[2026-06-18 21:45:01] ERROR: detokenizer: Connection reset\n")
    analysis = _analysis(tmp_path, {"logs/gpu-node-00/decode.log": log})
    (stop,) = _found(analysis, "operator_stop")
    assert "stopped from outside at 21:45:00" in stop.text and not is_anomaly(stop)
    errors = _found(analysis, "error_records")
    assert [f.at.strftime("%H:%M:%S") for f in errors] == ["21:40:00"]  # before the stop: still a fault
    assert analysis.incident_found


def test_a_flight_recorder_pickle_that_names_code_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"

    class Payload:
        def __reduce__(self) -> tuple:
            return (os.system, (f"touch {marker}",))

    data = pickle.dumps({"version": "2.10", "pg_config": {}, "pg_status": {}, "entries": [Payload()]}, protocol=4)
    analysis = _analysis(tmp_path, {"flight_recorder/nccl_trace_rank_0": data})
    assert not marker.exists()
    (entry,) = analysis.timeline.manifest["inputs"]
    assert (entry["format"], entry["parsed"], entry["quarantined"]) == ("flight_recorder", 0, 1)
    assert "refused to load" in analysis.timeline.quarantine.get_column("reason")[0]


@pytest.mark.parametrize("healthy", [
    "[2026-06-18 21:45:00] SIGTERM received. signum=None frame=None. Draining requests and shutting down...\n",
    "INFO:     Shutting down\nINFO:     Application shutdown complete.\n",
])
def test_an_operators_stop_alone_is_no_incident(tmp_path: Path, healthy: str) -> None:
    log = "[2026-06-18 21:44:00 TP0] Decode batch. #running-req: 0, #token: 0, #queue-req: 0, \n" + healthy
    analysis = _analysis(tmp_path, {"logs/gpu-node-00/decode.log": log})
    assert not analysis.incident_found, [f.text for f in analysis.findings if is_anomaly(f)]


def _denials(analysis: Analysis) -> list[str]:
    """`checked` lines that deny a finding of the same analysis."""
    kinds = {f.kind for f in analysis.findings}
    checked = " | ".join(analysis.checked())
    denied = []
    if "frozen" in kinds and "none stopped for over" in checked:
        denied.append("a freeze")
    if ({"stuck_process"} & kinds or any("TP_DESYNC" in f.text for f in analysis.findings if f.kind == "stack_verdict")) \
            and "(no hang shown)" in checked:
        denied.append("a hang in the stacks")
    layered = {e.kind for e in analysis.timeline.profile.logs.events if e.layer and e.fault}
    if kinds & layered and "none found" in checked:
        denied.append("a failure mode")
    if analysis.timeline.events.filter(pl.col("priority") <= 3).height and "no log record at error" in checked:
        denied.append("an error record")
    return denied


def test_what_was_checked_never_denies_a_finding(tmp_path: Path) -> None:
    """summary.json's `checked` is built from what the detectors found: on the reference incident
    (a freeze, a desync) and on bundles of every failure mode above, no line of it denies a finding."""
    reference = analyze(Path(__file__).resolve().parents[2] / "data" / "incidents" / "dsv4-pd-wedge-2026-06-18",
                        tmp_path / "reference-case")
    assert _denials(reference) == []
    checked = reference.checked()
    assert any("decode" in line and "stopped for over 60 s with work pending" in line for line in checked)
    assert any("(a hang shown: see the findings)" in line for line in checked)
    for n, files in enumerate([{"logs/h/train.log": NCCL_WATCHDOG}, {"logs/h/decode.log": SGLANG_START}]):
        assert _denials(_analysis(tmp_path / str(n), files)) == []


def _served_then_silent(tmp_path: Path, *, after: bytes = b"") -> Analysis:
    """The corpus' single-GPU SGLang log (its README: last Decode batch 2025-08-08 03:35:19, then the
    log ends) beside a kernel journal of the same time that goes on to 03:50 with nothing about it."""
    from tests.test_corpus import CORPUS

    log = CORPUS / "logs" / "server_log_qwen3_0.6b_single_gpu_2025-08-08.log"
    if not log.is_file():
        pytest.skip(f"no corpus at {CORPUS}")
    since = 1_754_623_800_000_000  # 2025-08-08 03:30:00 UTC, in µs: the kernel logs before and after the end
    kernel = b"".join(export_entry(("__REALTIME_TIMESTAMP", str(since + n * 600_000_000)), ("_HOSTNAME", "gpu-node-00"),
                                   ("PRIORITY", "6"), ("_TRANSPORT", "kernel"),
                                   ("MESSAGE", f"usb 1-{n}: new high-speed USB device number {n + 2} using xhci_hcd"))
                      for n in range(3))
    return _analysis(tmp_path, {"logs/gpu-node-00/sglang.log": log.read_bytes(), "journal/kernel.export": kernel + after})


def test_a_serving_log_that_ends_while_the_evidence_goes_on_is_a_silent_death(tmp_path: Path) -> None:
    (death,) = _found(_served_then_silent(tmp_path), "silent_death")
    assert death.at.strftime("%Y-%m-%d %H:%M:%S") == "2025-08-08 03:35:19"
    assert "ends at 03:35:19 while it was serving" in death.text and "until 03:50:00" in death.text
    assert "look for the OOM killer or an Xid" in death.text


def test_a_serving_log_beside_a_later_unrelated_log_is_not_called_dead(tmp_path: Path) -> None:
    """Another log that only begins after this one ended (another day's paste) shows nothing of
    whether this process lived on: no claim."""
    later = 1_754_624_400_000_000  # 2025-08-08 03:40:00 UTC: after the log's end
    kernel = b"".join(export_entry(("__REALTIME_TIMESTAMP", str(later + n * 300_000_000)), ("_HOSTNAME", "gpu-node-00"),
                                   ("PRIORITY", "6"), ("_TRANSPORT", "kernel"), ("MESSAGE", f"usb 1-{n}: reset"))
                      for n in range(3))
    from tests.test_corpus import CORPUS

    log = CORPUS / "logs" / "server_log_qwen3_0.6b_single_gpu_2025-08-08.log"
    if not log.is_file():
        pytest.skip(f"no corpus at {CORPUS}")
    analysis = _analysis(tmp_path, {"logs/gpu-node-00/sglang.log": log.read_bytes(), "journal/kernel.export": kernel})
    assert _found(analysis, "silent_death") == []


def test_a_serving_log_alone_is_not_called_dead(tmp_path: Path) -> None:
    """With nothing after its last line, the log's end is the evidence's end: no claim."""
    from tests.test_corpus import CORPUS

    log = CORPUS / "logs" / "server_log_qwen3_0.6b_single_gpu_2025-08-08.log"
    if not log.is_file():
        pytest.skip(f"no corpus at {CORPUS}")
    analysis = _analysis(tmp_path, {"logs/gpu-node-00/sglang.log": log.read_bytes()})
    assert _found(analysis, "silent_death") == []


RAISED_LINES = ["Traceback (most recent call last):", "ValueError: bad", "torch.OutOfMemoryError: CUDA out of memory",
                "RuntimeException: x", "Error: failed", "my_Error: no", "404Error: no", "Errors: no", "ErrorX: no",
                "an Error:no space", "KeyboardInterrupt", "", None]


def test_a_raised_exception_line_is_what_the_one_pattern_it_replaced_found() -> None:
    """`raised` searches three patterns apart (faster); the lines it finds are exactly those the
    single alternation it replaced found, read here by Python's own regex engine."""
    one = re.compile(r"Traceback \(most recent call last\)|\b[A-Za-z]*(?:Error|Exception)\b: ")
    found = pl.DataFrame({"m": RAISED_LINES}, schema={"m": pl.String}).select(raised(pl.col("m"))).to_series()
    assert found.to_list() == [None if line is None else bool(one.search(line)) for line in RAISED_LINES]
