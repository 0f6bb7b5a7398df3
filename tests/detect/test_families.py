"""The failure-mode families real fleets meet, each read from real public lines through the real
readers and detector: NVIDIA's Xid catalogue (meaning and action; non-fatal events apart), torchrun's
ChildFailedError table, processes killed by SIGKILL, the kernel's hung-task reports with the
subsystem of their call trace, NCCL's error kinds, CUDA out of memory from every server, and the
NVLink fabric (NVSwitch SXids, the fabric manager, CUDA's 802).

Every log below is copied as it is from the public report named beside it (whole lines, in their
order; where a report's quote breaks off mid-line, the test stops at the line before). The values a
test expects are the ones those lines themselves say (a rank, a pid, an exit code, a task), or the
ones NVIDIA's and NCCL's own tables give (the action for an Xid), never what the code produced."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from forensics.analyze import Analysis, is_anomaly
from forensics.detect.failures import headline
from forensics.profiles import layers, meaning
from tests.detect.test_failures import _analysis, _found, _journal

NONFATAL = "non-fatal device errors"


def _only(analysis: Analysis, kind: str):
    (finding,) = _found(analysis, kind)
    return finding


# --- NVIDIA's Xid catalogue ----------------------------------------------------------------------------

XID_LINES = "\n".join([
    # leptonai/gpud@4a8de33a:components/memory/testdata/dmesg.decode.iso.log:3
    "kern  :warn  : 2025-01-21T04:41:44,283575+00:00 NVRM: Xid (PCI:0000:38:00): 13, pid='<unknown>', "
    "name=<unknown>, Graphics SM Warp Exception on (GPC 9, TPC 1, SM 1): Out Of Range Address",
    # NVIDIA's Xid catalogue page, "Step 1: Determine Xid Code"
    "[...] NVRM: Xid (PCI:0000:5a:00): 79, GPU has fallen off the bus.",
    # leptonai/gpud@4a8de33a:components/accelerator/nvidia/xid/kmsg_test.go:176
    "[171167.621162] NVRM: Xid (PCI:0009:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x4 "
    "(Drain and Reset)",
    # stas00/ml-engineering@7bc7c305:compute/accelerator/nvidia/debug.md
    "NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.",
    # https://github.com/leptonai/gpud/pull/1160
    "NVRM: Xid (PCI:0000:01:00): 144, SAW_MVB Nonfatal XC0 i0 Link 0 (0x00000001 0x00000008 0x00000000 0x00000000 "
    "0x00000000 0x00000000)",
]) + "\n"
# leptonai/gpud@4a8de33a:components/accelerator/nvidia/xid/testdata/dmesg-with-xid-119.log:3 (dmesg -T)
XID_119 = ("[Sun Feb 23 16:24:18 2025] NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after "
           "6s of waiting for RPC response from GPU4 GSP! Expected function 103 (GSP_RM_ALLOC) (0x2081 0x4).\n")


def test_every_xid_code_of_nvidias_catalogue_has_its_meaning_and_action() -> None:
    """Codes 1–172 as NVIDIA's catalogue lists them (docs.nvidia.com/deploy/xid-errors/
    analyzing-xid-catalog.html): each has a meaning and a mnemonic; the immediate actions the page
    gives are there, in words; the non-fatal kind's pattern lists exactly the codes NVIDIA says to
    IGNORE."""
    for code in range(1, 173):
        assert meaning("xid", code) and meaning("xid_name", code), code
    # what the catalogue page says, row by row
    for code, name, action in ((13, "ROBUST_CHANNEL_GR_EXCEPTION", "RESTART_APP"),
                               (48, "ROBUST_CHANNEL_GPU_ECC_DBE", "WORKFLOW_XID_48"),
                               (63, "INFOROM_DRAM_RETIREMENT_EVENT", "IGNORE"),
                               (79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM"),
                               (95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "RESET_GPU"),
                               (119, "GSP_RPC_TIMEOUT", "RESET_GPU"), (154, "GPU_RECOVERY_ACTION_CHANGED", "XID_154")):
        assert (meaning("xid_name", code) or "").startswith(name) and meaning("xid_action", code) == action, code
    kernel = next(layer for layer in layers() if layer.name == "kernel")
    for bucket in set(kernel.meanings["xid_action"].values()):
        assert meaning("xid_bucket", bucket), bucket
    ignored = {code for code, bucket in kernel.meanings["xid_action"].items() if bucket == "IGNORE"}
    (nonfatal,) = [e.pattern for e in kernel.events if e.kind == "gpu_xid_nonfatal"]
    listed = set(re.search(r"\): \(\?:([0-9|]+)\),", nonfatal)[1].split("|"))
    assert listed == ignored


def test_xid_findings_say_what_each_code_means_and_nvidias_action(tmp_path: Path) -> None:
    analysis = _analysis(tmp_path, {"logs/gpu-node-00/kmsg.log": XID_LINES, "logs/gpu-node-00/dmesg_t.log": XID_119})
    fault = _only(analysis, "gpu_xid_error")
    xids = {x["code"]: x for x in fault.facts["xids"]}
    assert set(xids) == {13, 79, 119, 154}
    assert xids[13]["gpus"] == ["PCI:0000:38:00"] and xids[13]["action"] == "RESTART_APP"
    assert (xids[119]["pid"], xids[119]["process"], xids[119]["gpus"]) == ("2024380", "nvidia-smi", ["PCI:0000:9b:00"])
    assert xids[154]["recovery_action"] == "Drain and Reset"
    assert xids[79]["action"] == "RESTART_BM"
    assert "Xid 79 (PCI:0000:5a:00): GPU has fallen off the bus: the GPU no longer answers on PCIe — NVIDIA's " \
           "action: restart the machine (bare metal) (RESTART_BM)" in fault.text
    assert "the driver now asks for: Drain and Reset" in fault.text
    assert fault.track == getattr(analysis, "main_track", analysis.timeline.profile.logs.main_track) != NONFATAL


def test_a_non_fatal_gpu_event_is_a_finding_not_the_wedge(tmp_path: Path) -> None:
    """Xid 63 (a row remapped: NVIDIA says IGNORE) and an NVLink5 Xid whose line says Nonfatal: a
    finding on its own track, reported, never a cause on the first screen, never in the incident's
    signature."""
    analysis = _analysis(tmp_path, {"logs/gpu-node-00/kmsg.log": XID_LINES})
    event = _only(analysis, "gpu_xid_nonfatal")
    assert event.track == NONFATAL and not is_anomaly(event) and event.facts["non_fatal"]
    xids = {x["code"]: x for x in event.facts["xids"]}
    assert set(xids) == {63, 144}
    assert xids[63]["pid"] == "1896" and xids[63]["action"] == "IGNORE"
    assert (xids[144]["units"], xids[144]["severity"]) == (["SAW_MVB"], "Nonfatal")
    assert event.text.startswith("non-fatal GPU events on") and "no action needed on the GPU (IGNORE)" in event.text
    assert event not in headline(analysis.reported())
    assert not any("gpu_xid_nonfatal" in part for part in analysis.signature()["parts"])


def test_a_non_fatal_gpu_event_starts_no_capture() -> None:
    from forensics.capture.signs import sign_of

    lines = XID_LINES.splitlines()
    assert sign_of(lines[1], 3) == ("gpu_xid_error", "device fault")
    assert sign_of(lines[3], 3) is None


# --- PCIe: the kernel's AER ------------------------------------------------------------------------

AER = "\n".join([
    # https://github.com/wilicc/gpu-burn/issues/1
    "[74785.660380] pcieport 0000:00:02.0: PCIe Bus Error: severity=Corrected, type=Data Link Layer, "
    "id=0010(Transmitter ID)",
    "[74889.542044] pcieport 0000:00:02.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, "
    "id=0010(Receiver ID)",
    # https://github.com/geerlingguy/raspberry-pi-pcie-devices/issues/116
    "[   58.842410] pcieport 0000:00:00.0: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, "
    "(Requester ID)",
]) + "\n"


def test_corrected_and_non_fatal_pcie_errors_are_reported_apart_from_the_fatal_one(tmp_path: Path) -> None:
    analysis = _analysis(tmp_path, {"logs/gpu-node-00/dmesg.log": AER})
    fatal, nonfatal = _only(analysis, "pcie_uncorrected_error"), _only(analysis, "pcie_nonfatal_error")
    assert "severity=Uncorrected (Fatal)" in fatal.text and fatal in headline(analysis.reported())
    assert nonfatal.track == NONFATAL and nonfatal not in headline(analysis.reported())
    assert nonfatal.text.startswith("2 × corrected or non-fatal PCIe errors")


# --- torchrun's ChildFailedError table ------------------------------------------------------------

# https://github.com/lzhxmu/CPPO/issues/6
CPPO = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
============================================================
src/open_r1/grpo_gsm.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2025-05-21_15:43:03
  host      : mlxlab115rp2n7682d40d9-20250521025625-6dyyd3-8nir8b-worker
  rank      : 0 (local_rank: 0)
  exitcode  : -9 (pid: 14750)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 14750
============================================================
"""  # noqa: W291 - the table's first line ends in a space, as torch writes it

# https://github.com/CVMI-Lab/PLA/issues/18 (the report's quote breaks off before the root cause)
PLA = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2023-09-04_10:10:23
  host      : ubuntu
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 3669031)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
[2]:
  time      : 2023-09-04_10:10:23
  host      : ubuntu
  rank      : 2 (local_rank: 2)
  exitcode  : 1 (pid: 3669032)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
[3]:
  time      : 2023-09-04_10:10:23
  host      : ubuntu
  rank      : 3 (local_rank: 3)
  exitcode  : 1 (pid: 3669033)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
"""

# https://github.com/xzz777/SCTNet/issues/47 (torch 1.9's format: "Root Cause:", "Other Failures:", msg)
SCTNET = """\
tools/train.py FAILED         
=======================================
Root Cause:
[0]:
  time: 2025-02-20_22:01:20
  rank: 0 (local_rank: 0)
  exitcode: 1 (pid: 866229)
  error_file: <N/A>
  msg: "Process failed with exitcode 1"
=======================================
Other Failures:
[1]:
  time: 2025-02-20_22:01:20
  rank: 1 (local_rank: 1)
  exitcode: 1 (pid: 866230)
  error_file: <N/A>
  msg: "Process failed with exitcode 1"
"""  # noqa: W291

# https://github.com/hpcaitech/ColossalAI/issues/3514
COLOSSAL = """\
WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 812914 closing signal SIGTERM
WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 812915 closing signal SIGTERM
WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 812916 closing signal SIGTERM
ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 3 (pid: 812917) of binary: /data/chenhao/anaconda3/envs/ColossalAI-Chat/bin/python
"""

# the kernel layer's OOM-killer sample (mm/oom_kill.c's words)
OOM_KILL = ("Out of memory: Killed process 2155 (python3) total-vm:98765432kB, anon-rss:81234567kB, file-rss:0kB, "
            "shmem-rss:0kB, UID:0 pgtables:160000kB oom_score_adj:0")


def test_a_sigkilled_rank_in_torchruns_table_is_named_with_its_pid_and_signal(tmp_path: Path) -> None:
    analysis = _analysis(tmp_path, {"logs/gpu-node-00/train.log": CPPO})
    failure = _only(analysis, "distributed_launch_failure")
    facts = failure.facts
    assert (facts["ranks"], facts["pids"], facts["exit_codes"], facts["signals"]) == ([0], [14750], [-9], ["SIGKILL"])
    assert facts["root_cause_rank"] == 0 and facts["scripts"] == ["src/open_r1/grpo_gsm.py"]
    assert facts["hosts"] == ["mlxlab115rp2n7682d40d9-20250521025625-6dyyd3-8nir8b-worker"]
    assert "rank 0 (pid 14750" in failure.text and "exit code -9 (SIGKILL)" in failure.text
    assert "SIGKILL: killed from outside, with no chance to write a traceback" in failure.text
    assert "No OOM-killer report is in the evidence for it" in failure.text


def test_a_sigkill_is_told_beside_the_oom_killers_report_of_its_host(tmp_path: Path) -> None:
    analysis = _analysis(tmp_path, {"logs/gpu-node-00/train.log": CPPO,
                                    "journal/kernel.export": _journal((10, "kernel", "3", OOM_KILL))})
    failure = _only(analysis, "distributed_launch_failure")
    assert failure.facts["oom_killer"] == [{"pid": 2155, "name": "python3"}]
    assert "The kernel's OOM killer killed python3 (pid 2155) on this host" in failure.text


def test_every_rank_failing_alike_is_one_failure_of_the_job_not_the_named_ranks(tmp_path: Path) -> None:
    failure = _only(_analysis(tmp_path, {"logs/ubuntu/train.log": PLA}), "distributed_launch_failure")
    facts = failure.facts
    assert facts["ranks"] == [1, 2, 3] and facts["pids"] == [3669031, 3669032, 3669033]
    assert facts["exit_codes"] == [1] and facts["signals"] == [] and facts["all_alike"]
    assert facts["hosts"] == ["ubuntu"] and not facts["tracebacks_recorded"]
    assert "ranks 1, 2, 3" in failure.text and "Every rank failed alike, at the same second" in failure.text
    assert "No rank's traceback is in the table" in failure.text


def test_torch_19s_table_format_is_read_and_its_root_cause_is_only_the_first_seen(tmp_path: Path) -> None:
    """The table begins at "Root Cause:", a line no kind takes: the table is found as it is."""
    failure = _only(_analysis(tmp_path, {"logs/h/train.log": SCTNET}), "distributed_launch_failure")
    facts = failure.facts
    assert (facts["ranks"], facts["pids"], facts["exit_codes"]) == ([0, 1], [866229, 866230], [1])
    assert facts["root_cause_rank"] == 0 and facts["all_alike"]
    assert "not rank 0's own" in failure.text


def test_elastics_own_line_for_a_sigkilled_child_names_the_signal(tmp_path: Path) -> None:
    failure = _only(_analysis(tmp_path, {"logs/h/train.log": COLOSSAL}), "distributed_launch_failure")
    assert failure.facts["signals"] == ["SIGKILL"]
    assert "failed (exitcode: -9) local_rank: 3 (pid: 812917)" in failure.text and "SIGKILL: killed" in failure.text


def test_the_corpus_table_folded_into_a_collective_timeouts_record_is_still_read(tmp_path: Path) -> None:
    """corpus3's 8-rank accelerate job: torchrun's table follows the watchdog's last line, whose record
    the reader folds it into; its README: "launcher reports rank 7 pid 2608408 SIGABRT"."""
    from tests.test_corpus3 import ACCELERATE, CORPUS3, _analyze, _readme_says

    if not (CORPUS3 / "README.md").is_file():
        pytest.skip(f"no corpus at {CORPUS3}")
    _readme_says(ACCELERATE, "launcher reports rank 7 pid 2608408 SIGABRT at 2026-08-10_03:05:11")
    failure = _only(_analyze(tmp_path, ACCELERATE), "distributed_launch_failure")
    facts = failure.facts
    assert (facts["ranks"], facts["pids"], facts["signals"]) == ([7], [2608408], ["SIGABRT"])
    assert "SIGABRT: the process aborted itself" in failure.text


# --- processes killed by a signal, no traceback -----------------------------------------------------

def test_a_container_exit_137_and_a_dataloader_killed_are_told_as_sigkill(tmp_path: Path) -> None:
    analysis = _analysis(tmp_path, {
        "logs/h/compose.log": "scalellm exited with code 137\n",  # https://github.com/vectorch-ai/ScaleLLM/issues/38
        # https://github.com/hezhangsprinter/DCPDN/issues/12
        "logs/h/train.log": "RuntimeError: DataLoader worker (pid 19597) is killed by signal: Killed.\n"})
    for kind in ("container_exited", "shell_killed"):
        finding = _only(analysis, kind)
        assert finding.facts["signals"] == ["SIGKILL"], kind
        assert "SIGKILL: killed from outside" in finding.text


# --- hung tasks: the task, its pid and the subsystem of its call trace ----------------------------

# https://github.com/NVIDIA/k8s-device-plugin/issues/77 (plain dmesg: seconds since boot)
HUNG_NVIDIA = """\
[  721.028170] INFO: task nvc:[driver]:5403 blocked for more than 120 seconds.
[  721.028229]       Tainted: P           O    4.4.146-1.el7.elrepo.x86_64 #1
[  721.028273] "echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.
[  721.028323] nvc:[driver]    D ffff883f2cc43bd8     0  5403   5396 0x00000084
[  721.028331]  ffff883f2cc43bd8 ffffffff8170e16e ffff883f33d62c80 ffff883f2cc44000
[  721.028336]  ffffffffa0a53a9c ffff883f33d62c80 00000000ffffffff ffffffffa0a53aa0
[  721.028341]  ffff883f2cc43bf0 ffffffff8170de85 ffffffffa0a53a98 ffff883f2cc43c00
[  721.028346] Call Trace:
[  721.028360]  [<ffffffff8170e16e>] ? schedule_preempt_disabled+0xe/0x10
[  721.028368]  [<ffffffff8170de85>] schedule+0x35/0x80
[  721.028374]  [<ffffffff8170e16e>] schedule_preempt_disabled+0xe/0x10
[  721.028379]  [<ffffffff8170fca4>] __mutex_lock_slowpath+0xb4/0x130
[  721.028383]  [<ffffffff8170fd3f>] mutex_lock+0x1f/0x2f
[  721.028422]  [<ffffffffa09c376e>] uvm_gpu_retain_by_uuid+0x1e/0x40 [nvidia_uvm]
"""

# https://github.com/openzfs/zfs/pull/2828 (no time stamps: the report pasted bare)
HUNG_NFSD = """\
INFO: task nfsd:2777 blocked for more than 120 seconds.
      Tainted: P           O 3.14.4 #1
"echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.
nfsd            D ffffffff8181d000     0  2777      2 0x00000000
 ffff88075b0d9c48 0000000000000046 ffff88075b0d9c04 ffff88075b0d8010
 0000000000014440 0000000000014440 ffff88075c424210 ffff880768818fb0
 ffff88075b0d9d38 ffffffffa069d0c4 ffffffffa069d0c0 00000000ffffffff
Call Trace:
 [<ffffffff816442f9>] schedule+0x29/0x70
 [<ffffffff8164465e>] schedule_preempt_disabled+0xe/0x10
 [<ffffffff81646024>] __mutex_lock_slowpath+0x1a4/0x240
 [<ffffffff816460e3>] mutex_lock+0x23/0x40
 [<ffffffffa0689705>] nfs4_lock_state+0x15/0x20 [nfsd]
 [<ffffffffa068b559>] nfsd4_renew+0x49/0xb0 [nfsd]
 [<ffffffffa067fc71>] nfsd4_proc_compound+0x3f1/0x580 [nfsd]
 [<ffffffffa066d258>] nfsd_dispatch+0xa8/0x1b0 [nfsd]
 [<ffffffffa062297c>] svc_process_common+0x30c/0x530 [sunrpc]
 [<ffffffffa066d930>] ? nfsd_pool_stats_release+0x60/0x60 [nfsd]
 [<ffffffffa0622ef2>] svc_process+0x112/0x160 [sunrpc]
 [<ffffffffa066d9ef>] nfsd+0xbf/0x130 [nfsd]
 [<ffffffffa066d930>] ? nfsd_pool_stats_release+0x60/0x60 [nfsd]
 [<ffffffff81098dee>] kthread+0xce/0xf0
 [<ffffffff81098d20>] ? kthread_freezable_should_stop+0x70/0x70
 [<ffffffff8165213c>] ret_from_fork+0x7c/0xb0
"""


def test_a_hung_task_in_the_nvidia_driver_names_its_task_pid_and_the_driver(tmp_path: Path) -> None:
    hang = _only(_analysis(tmp_path, {"logs/gpu-node-00/dmesg.log": HUNG_NVIDIA}), "hung_task")
    (task,) = hang.facts["tasks"]
    assert (task["task"], task["pid"], task["seconds"]) == ("nvc:[driver]", 5403, 120)
    assert task["frame"] == "uvm_gpu_retain_by_uuid [nvidia_uvm]" and "NVIDIA GPU driver" in task["subsystem"]
    assert "nvc:[driver] (pid 5403) blocked for more than 120 s in the NVIDIA GPU driver" in hang.text


def test_a_hung_task_in_a_filesystem_is_not_called_a_gpu(tmp_path: Path) -> None:
    hang = _only(_analysis(tmp_path, {"logs/nfs-server/kern.log": HUNG_NFSD}), "hung_task")
    (task,) = hang.facts["tasks"]
    assert (task["task"], task["pid"], task["seconds"]) == ("nfsd", 2777, 120)
    assert task["frame"] == "nfs4_lock_state [nfsd]"
    assert "NFS server" in task["subsystem"] and "not the GPU" in task["subsystem"] and "NVIDIA" not in hang.text


# --- NCCL's error kinds --------------------------------------------------------------------------

NCCL = {
    # https://github.com/verl-project/verl/issues/161
    "usage.log": """\
torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.20.5
ncclInvalidUsage: This usually reflects invalid usage of NCCL library.
Last error:
Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 10
""",
    # https://github.com/NVIDIA/nccl/issues/2076
    "remote.log": """\
torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:268, remote process exited or there was a network error, NCCL version 2.21.5
ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.
Last error:
socketProgressOpt: Call to recv from 172....<33759> failed : Connection reset by peer
""",
    # https://github.com/NVIDIA/nccl/issues/1410
    "cuda.log": """\
[rank7]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5
[rank7]: ncclUnhandledCudaError: Call to CUDA function failed.
[rank7]: Last error:
[rank7]: Cuda failure 1 'invalid argument'
""",
    # https://github.com/MariusBeckerIESE/ChatBot_AI/issues/7
    "internal.log": "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:"
                    "1333, internal error - please report this issue to the NCCL developers, NCCL version 2.18.1\n",
    # https://github.com/pytorch/pytorch/issues/149984
    "system.log": "Collective WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1000000) raised the "
                  "following async exception: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details), "
                  "NCCL version 2.25.1\n",
}


def test_each_nccl_error_kind_says_what_it_points_at_and_ncclss_last_error(tmp_path: Path) -> None:
    failure = _only(_analysis(tmp_path, {f"logs/h/{name}": text for name, text in NCCL.items()}),
                    "distributed_transport_failure")
    errors = {e["code"]: e for e in failure.facts["nccl_errors"]}
    assert set(errors) == {"ncclInvalidUsage", "ncclRemoteError", "ncclUnhandledCudaError", "ncclInternalError",
                           "ncclSystemError"}
    assert errors["ncclInvalidUsage"]["last_error"] == ("Duplicate GPU detected : rank 1 and rank 0 both on CUDA "
                                                        "device 10")
    assert errors["ncclRemoteError"]["last_error"] == ("socketProgressOpt: Call to recv from 172....<33759> failed : "
                                                       "Connection reset by peer")
    assert errors["ncclUnhandledCudaError"]["last_error"] == "Cuda failure 1 'invalid argument'"
    assert "not the network" in errors["ncclInvalidUsage"]["meaning"]
    assert "this rank is the victim" in errors["ncclRemoteError"]["meaning"]
    assert "NCCL's error: ncclInvalidUsage — the program used NCCL wrongly" in failure.text


# --- CUDA out of memory, from every server -----------------------------------------------------------

OOM = {
    # https://github.com/noonghunna/club-3090/issues/16
    "vllm.log": "(EngineCore pid=112) ERROR 05-01 14:39:06 [core.py:1131] torch.OutOfMemoryError: CUDA out of memory. "
                "Tried to allocate 50.00 MiB. GPU 0 has a total capacity of 23.56 GiB of which 21.75 MiB is free. "
                "Including non-PyTorch memory, this process has 23.50 GiB memory in use. Of the allocated memory 22.88 "
                "GiB is allocated by PyTorch, with 24.00 MiB allocated in private pools (e.g., CUDA Graphs), and 275.38 "
                "MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
                "Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-"
                "cuda-alloc-conf)\n",
    # https://github.com/vllm-project/vllm/issues/10439
    "vllm_start.log": "vllm-1  | ERROR 11-18 18:07:28 engine.py:366] ValueError: No available memory for the cache "
                      "blocks. Try increasing `gpu_memory_utilization` when initializing the engine.\n",
    # https://github.com/sgl-project/sglang/issues/4330
    "sglang.log": "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n",
    # https://github.com/huggingface/text-generation-inference/issues/755
    "tgi_start.log": "Error: Warmup(Generation(\"Not enough memory to handle 4096 prefill tokens. You need to decrease "
                     "`--max-batch-prefill-tokens`\"))\n",
    # https://github.com/huggingface/text-generation-inference/issues/653
    "tgi.log": ":infer:send_error: text_generation_router::infer: router/src/infer.rs:554: Request failed during "
               "generation: Server error: CUDA out of memory. Tried to allocate 16.00 MiB (GPU 0; 22.20 GiB total "
               "capacity; 20.75 GiB already allocated; 5.12 MiB free; 22.20 GiB allowed; 20.86 GiB reserved in total by "
               "PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation. "
               " See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF\n",
    # https://github.com/ggml-org/llama.cpp/issues/20431
    "llama.log": "load_tensors: loading model tensors, this can take a while... (mmap = true, direct_io = false)\n"
                 "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 144817.04 MiB on device 0: cudaMalloc failed: "
                 "out of memory\n"
                 "alloc_tensor_range: failed to allocate CUDA0 buffer of size 151851674624\n"
                 "llama_model_load: error loading model: unable to allocate CUDA0 buffer\n",
    # https://github.com/triton-inference-server/server/issues/5014
    "triton.log": "2022-10-26 09:09:43.592309478 [E:onnxruntime:, sequential_executor.cc:368 Execute] Non-zero status "
                  "code returned while running FusedConv node. Name:'model/action/S0R1_conv1_1' Status Message: "
                  "/workspace/onnxruntime/onnxruntime/core/providers/cuda/cuda_call.cc:122 bool onnxruntime::CudaCall("
                  "ERRTYPE, const char*, const char*, ERRTYPE, const char*) [with ERRTYPE = cudaError; bool THRW = true] "
                  "/workspace/onnxruntime/onnxruntime/core/providers/cuda/cuda_call.cc:116 bool onnxruntime::CudaCall("
                  "ERRTYPE, const char*, const char*, ERRTYPE, const char*) [with ERRTYPE = cudaError; bool THRW = true] "
                  "CUDA failure 2: out of memory ; GPU=0 ; hostname=e14ca68f-learner-0 ; expr=cudaMalloc((void**)&p, "
                  "size);\n",
}


@pytest.mark.parametrize("name, server, phase, numbers", [
    ("vllm.log", "vLLM", None, {"gpu": "0", "asked": "50.00 MiB", "free": "21.75 MiB", "total": "23.56 GiB"}),
    ("vllm_start.log", "vLLM", "start-up", {}),
    ("sglang.log", "SGLang", "start-up", {}),
    ("tgi_start.log", "TGI (text-generation-inference)", "start-up", {}),
    ("tgi.log", "TGI (text-generation-inference)", "serving",
     {"gpu": "0", "asked": "16.00 MiB", "free": "5.12 MiB", "total": "22.20 GiB"}),
    ("llama.log", "llama.cpp", "start-up", {"gpu": "0", "asked": "144817.04 MiB"}),
    ("triton.log", "ONNX Runtime (as in Triton's onnxruntime backend)", "serving", {"gpu": "0"}),
])
def test_cuda_out_of_memory_names_the_server_the_phase_and_the_numbers(tmp_path: Path, name: str, server: str,
                                                                       phase: str | None, numbers: dict) -> None:
    oom = _only(_analysis(tmp_path, {f"logs/h/{name}": OOM[name]}), "cuda_oom")
    (entry,) = oom.facts["oom"]
    assert (entry["server"], entry["phase"]) == (server, phase)
    assert {k: entry.get(k) for k in numbers} == numbers
    if phase:
        assert f"Out of GPU memory: {server} {'at start-up' if phase == 'start-up' else 'while serving'}" in oom.text


# --- the NVLink fabric: NVSwitch SXids, the fabric manager, CUDA's 802 -------------------------------

SXID_KERNEL = {
    # https://huggingface.co/datasets/LHRS-UM-FERI/MENTHOS-dataset-rootcause
    "switch.log": "nvidia-nvswitch0: SXid (PCI:0000:c2:00.0): 20034, Fatal, Link 28 LTSSM Fault Up\n"
                  "nvidia-nvswitch0: SXid (PCI:0000:c2:00.0): 20034, Fatal, Link 29 LTSSM Fault Up\n",
    # https://github.com/NVIDIA/nvtrust/issues/124
    "dmesg.log": "[   38.175561] nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Data {0x0000002b, 0x0000002b, "
                 "0x00000000, 0x0000002b, 0x80005302, 0x00000000, 0x00000000, 0x00000000, 0x00000000}\n"
                 "[   38.178720] nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 44 Minion Link DLREQ "
                 "interrupt\n"
                 "[   38.180708] nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Severity 0 Engine instance 44 "
                 "Sub-engine instance 00\n",
}
# leptonai/gpud@4a8de33a:components/accelerator/nvidia/fabric-manager/log_matcher.go:7, :13, :19
FABRIC_MANAGER = """\
[Jul 09 2024 18:14:07] [ERROR] [tid 12727] detected NVSwitch non-fatal error 12028 on fid 0 on NVSwitch pci bus id 00000000:86:00.0 physical id 3 port 61
[Jul 23 2024 07:53:55] [ERROR] [tid 841] detected NVSwitch fatal error 20034 on fid 0 on NVSwitch pci bus id 00000000:86:00.0 physical id 3 port 33
[Sep 17 2024 06:01:46] [ERROR] [tid 1230079] failed to find the GPU handle 5410063385821516767 in the multicast team request setup 6130285411925746235.
"""
# https://github.com/data-infra/cube-studio/issues/29
FM_DOWN = """\
Sep 18 03:19:01 ubuntu2404 nvidia-fabricmanager-start.sh[4753]: Detected Pre-NVL5 system
Sep 18 03:19:01 ubuntu2404 nvidia-fabricmanager-start.sh[4756]: request to query NVSwitch device information from NVSwitch driver failed with error:WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]
Sep 18 03:19:01 ubuntu2404 nvidia-fabricmanager-start.sh[4753]: "/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg" failed! Exit code: 1
Sep 18 03:19:01 ubuntu2404 systemd[1]: nvidia-fabricmanager.service: Control process exited, code=exited, status=1/FAILURE
"""
# https://github.com/haotian-liu/LLaVA/issues/683
CUDA_802 = ("RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling "
            "NumCudaDevices() that might have already set an error? Error 802: system not yet initialized\n")


def test_every_sxid_of_the_fabric_manager_guide_has_its_name_class_and_a_recovery() -> None:
    """NVIDIA's Fabric Manager User Guide, appendix "NVSwitch SXid Errors": each SXid's name and class;
    where the guide gives no recovery of its own, its class's."""
    fabric = next(layer for layer in layers() if layer.name == "fabric")
    classes = fabric.meanings["sxid_class"]
    assert set(classes) == set(fabric.meanings["sxid"]) and set(classes.values()) <= {"non-fatal", "fatal",
                                                                                       "always fatal"}
    for code, cls in classes.items():
        assert meaning("sxid_action", code) or meaning("sxid_class_action", cls), code
    # as the guide lists them
    assert (meaning("sxid", 20034), classes["20034"]) == ("LTSSM Fault Up", "fatal")
    assert (meaning("sxid", 22013), classes["22013"]) == ("Minion Link DLREQ interrupt", "non-fatal")
    assert (meaning("sxid", 12020), classes["12020"]) == ("egress sequence ID error", "always fatal")


def test_nvswitch_sxids_are_named_and_the_non_fatal_ones_kept_apart(tmp_path: Path) -> None:
    analysis = _analysis(tmp_path, {f"logs/hgx-00/{name}": text for name, text in SXID_KERNEL.items()})
    fatal, nonfatal = _only(analysis, "nvswitch_error"), _only(analysis, "nvswitch_nonfatal_error")
    (sxid,) = fatal.facts["sxids"]
    assert (sxid["code"], sxid["count"], sxid["switches"], sxid["links"]) == (20034, 2, ["PCI:0000:c2:00.0"],
                                                                                ["28", "29"])
    assert sxid["name"] == "LTSSM Fault Up" and sxid["said"] == "fatal" and fatal in headline(analysis.reported())
    (other,) = nonfatal.facts["sxids"]
    assert (other["code"], other["links"], other["name"]) == (22013, ["44"], "Minion Link DLREQ interrupt")
    assert nonfatal.track == NONFATAL and nonfatal not in headline(analysis.reported())


def test_the_fabric_managers_own_reports_are_read(tmp_path: Path) -> None:
    analysis = _analysis(tmp_path, {"logs/hgx-00/fabricmanager.log": FABRIC_MANAGER})
    fatal, nonfatal = _only(analysis, "nvswitch_error"), _only(analysis, "nvswitch_nonfatal_error")
    assert [(s["code"], s["switches"], s["links"]) for s in fatal.facts["sxids"]] == [(20034, ["00000000:86:00.0"],
                                                                                     ["33"])]
    assert fatal.facts["multicast_failures"] == 1 and "multicast team" in fatal.text
    assert [(s["code"], s["links"]) for s in nonfatal.facts["sxids"]] == [(12028, ["61"])]


def test_a_fabric_manager_that_did_not_start_and_cudas_802_are_platform_faults(tmp_path: Path) -> None:
    analysis = _analysis(tmp_path, {"logs/ubuntu2404/fm.log": FM_DOWN, "logs/ubuntu2404/train.log": CUDA_802})
    down, not_ready = _only(analysis, "fabric_manager_down"), _only(analysis, "cuda_system_not_ready")
    assert down.text.startswith("2 × the fabric manager not running")
    assert down.facts["reasons"][0].startswith("its NVSwitch driver found no NVSwitch (NV_WARN_NOTHING_TO_DO)")
    assert "RuntimeError: Unexpected error from cudaGetDeviceCount()" in not_ready.text
    assert not_ready.host == "ubuntu2404"
    assert "nvidia-fabricmanager.service: Control process exited" in _only(analysis, "process_failed").text
    modes = {f.kind for f in headline(analysis.reported())}
    assert {"fabric_manager_down", "cuda_system_not_ready"} <= modes
