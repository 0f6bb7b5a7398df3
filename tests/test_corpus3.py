"""The third corpus of real evidence (`../shared/corpus3/`, kept outside the repository): c10d
watchdog logs and torchfrtrace output, a 4-node Ascend py-spy set, start-up deaths, DCGM and SGLang
scrapes, crash-looping units. Every file goes through ingest and analyze as a user would drop it
into a bundle and gives what its README's ground truth states: each expected fact is first found
in the file's own README row (`_readme_says`), so a test never asserts what the README does not
say. Where the suite falls short today a strict xfail names the gap. Skipped when the folder is not
beside the checkout (`FORENSICS_CORPUS3` points elsewhere)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from forensics.analyze import Analysis, analyze
from tests.conftest import assert_every_input_accounted

CORPUS3 = Path(os.environ.get("FORENSICS_CORPUS3", Path(__file__).resolve().parents[2] / "shared" / "corpus3"))
pytestmark = pytest.mark.skipif(not (CORPUS3 / "README.md").is_file(), reason=f"no corpus at {CORPUS3}")
FOLDER = {"pyspy": "stacks", "logs": "logs", "journald": "journal", "metrics": "metrics", "flight": "logs"}
ASCEND_SET = ("sglang_ascend_dp4x8_node99_DP0_TP0_decode_sync_5dumps.txt",
              "sglang_ascend_dp4x8_node103_DP1_TP8_idle_batch_sync_3dumps.txt",
              "sglang_ascend_dp4x8_node107_DP2_TP16_idle_batch_sync_3dumps.txt",
              "sglang_ascend_dp4x8_node111_DP3_TP24_idle_batch_sync_3dumps_no_final_newline.txt")


def _files() -> list[Path]:
    if not CORPUS3.is_dir():
        return []
    return sorted(p for p in CORPUS3.rglob("*") if p.is_file() and p.name != "README.md")


def _readme_says(name: str, *facts: str) -> None:
    """Each of `facts` is written in the README's row of `name` (the ground truth a test asserts)."""
    rows = [line for line in (CORPUS3 / "README.md").read_text().splitlines() if f"`{name}`" in line]
    assert rows, f"{name}: no README row"
    for fact in facts:
        assert fact in rows[0], f"{name}: the README does not say {fact!r}"


def _bundle(tmp_path: Path, *names: str) -> Path:
    for name in names:
        (source,) = [p for p in _files() if p.name == name]
        folder = tmp_path / "bundle" / FOLDER[source.relative_to(CORPUS3).parts[0]]
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, folder / name)
    return tmp_path / "bundle"


def _analyze(tmp_path: Path, *names: str) -> Analysis:
    return analyze(_bundle(tmp_path, *names), tmp_path / "case")


def _kinds(analysis: Analysis) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    for f in analysis.reported():
        found.setdefault(f.kind, []).append(f)
    return found


def _hms(at: Any) -> str:
    return at.strftime("%H:%M:%S") if at else "none"


@pytest.mark.parametrize("name", [p.name for p in _files()])
def test_every_file_is_read_quarantined_or_refused_with_a_reason(tmp_path: Path, name: str) -> None:
    analysis = _analyze(tmp_path, name)  # no traceback, whatever the file
    assert_every_input_accounted(analysis, name)


# -- flight/: the collective, the ranks, and who never entered it -----------------------------------

DEEPSPEED = "c10d_watchdog_2rank_deepspeed_pg1_broadcast_seq1_never_completed_interleaved_terminate.log"
ACCELERATE = "c10d_watchdog_8rank_accelerate_desync_2v6_broadcast_seq78_vs_gloo_allgather_quoted_blocks.log"
TORCHINFERNO = "c10d_watchdog_fr_stacktrace_8rank_tp8_llama70b_warmup_rank7_missing_seq59958.log"
VERL = "c10d_watchdog_ray_verl_2rank_desync_rank1_allreduce_seq2635_vs_rank0_reducescatter_seq2667.log"
TUTORIAL = "fr_trace_torchfrtrace_tutorial_2rank_rank1_missing_allreduce_seq5.txt"


def test_deepspeed_both_ranks_wait_in_broadcast_seq1_of_pg1_and_nothing_ever_completed(tmp_path: Path) -> None:
    _readme_says(DEEPSPEED, "**Uniform wait", "`PG ID 1`", "SeqNum=1, OpType=BROADCAST",
                 "`last enqueued work: 547, last completed work: -1`", "watchdog 20:27:21.43")
    (timeout,) = _kinds(_analyze(tmp_path, DEEPSPEED))["collective_timeout"]
    assert "ranks 0, 1 (PG 1) in BROADCAST seq 1" in timeout.text
    assert "last enqueued 547, last completed -1" in timeout.text
    assert "Every rank that reported waits in the same collective" in timeout.text and "desync" not in timeout.text
    assert _hms(timeout.at) == "20:27:21"


def test_deepspeed_the_stall_began_when_the_timed_out_work_did(tmp_path: Path) -> None:
    _readme_says(DEEPSPEED, "Stall began ≈20:17:21")
    assert _hms(_analyze(tmp_path, DEEPSPEED).key_times.started) == "20:17:21"


def test_accelerate_six_ranks_time_out_in_broadcast_seq78(tmp_path: Path) -> None:
    _readme_says(ACCELERATE, "Ranks 1,2,3,5,6,7: watchdog on `WorkNCCL(SeqNum=78, OpType=BROADCAST",
                 "`last enqueued work: 79, last completed work: 77`")
    (timeout,) = _kinds(_analyze(tmp_path, ACCELERATE))["collective_timeout"]
    assert "ranks 1, 2, 3, 5, 6, 7 (PG 0) in BROADCAST seq 78, ran 600 s of its 600 s timeout; last enqueued 79, " \
           "last completed 77" in timeout.text
    assert _hms(timeout.at) == "03:04:10"


def test_accelerate_ranks_0_and_4_never_entered_seq78_and_are_named(tmp_path: Path) -> None:
    _readme_says(ACCELERATE, "Ranks 0 and 4: `Last enqueued NCCL work: 77, last completed NCCL work: 77`",
                 "Culprits = ranks 0 and 4")
    (timeout,) = _kinds(_analyze(tmp_path, ACCELERATE))["collective_timeout"]
    assert timeout.facts["culprits"] == ["0", "4"] and timeout.facts["seq"] == [78]
    assert "Ranks 0, 4 never entered BROADCAST seq 78 (last enqueued work 77)" in timeout.text


def test_accelerate_gloo_connection_closed_is_the_aborts_consequence(tmp_path: Path) -> None:
    from forensics.detect.failures import headline

    _readme_says(ACCELERATE, "die later with `Connection closed by peer` as the others abort")
    analysis = _analyze(tmp_path, ACCELERATE)
    (closed,) = _kinds(analysis)["distributed_transport_failure"]
    assert closed.facts["consequence_of"] == "collective_timeout"
    assert closed not in headline(analysis.reported())  # not among the causes the post-mortem lists
    assert "Connection closed by peer" in closed.text


def test_torchinferno_rank3_times_out_in_allreduce_seq59958_and_all_ranks_terminate(tmp_path: Path) -> None:
    _readme_says(TORCHINFERNO, "Rank 3 watchdog: `SeqNum=59958, OpType=ALLREDUCE",
                 "PG status `last enqueued 59998, last completed 59957`", "all 8 ranks `Terminating` 18:08:32.71")
    kinds = _kinds(_analyze(tmp_path, TORCHINFERNO))
    (timeout,) = kinds["collective_timeout"]
    assert "rank 3 (PG 0) in ALLREDUCE seq 59958, ran 1800 s of its 1800 s timeout; last enqueued 59998, " \
           "last completed 59957" in timeout.text
    (abort,) = kinds["process_group_abort"]
    assert abort.text.startswith("8 × ranks aborted") and _hms(abort.at) == "18:08:32"


def test_torchinferno_rank7_never_entered_seq59958(tmp_path: Path) -> None:
    _readme_says(TORCHINFERNO, "**rank 7 reports `Last enqueued NCCL work: 59957, last completed 59957`**")
    (timeout,) = _kinds(_analyze(tmp_path, TORCHINFERNO))["collective_timeout"]
    assert timeout.facts["culprits"] == ["7"] and timeout.facts["seq"] == [59958]
    assert "Rank 7 never entered ALLREDUCE seq 59958 (last enqueued work 59957)" in timeout.text
    assert "its peers' logs would show" not in timeout.text


def test_torchinferno_the_stall_began_at_1730(tmp_path: Path) -> None:
    _readme_says(TORCHINFERNO, "stall began ≈17:30:32 (18:00:32 − 1800 s)")
    assert _hms(_analyze(tmp_path, TORCHINFERNO).key_times.started) == "17:30:32"


def test_torchinferno_where_it_hung_is_said(tmp_path: Path) -> None:
    _readme_says(TORCHINFERNO, "FR stack of the failed all_reduce = `_decode_linear_all_reduce` ← "
                 "`_attention_prefill_ragged` ← … ← `_capture_ragged_prefill_logits_graph` ← "
                 "`_warmup_online_mixed_prefix_suffix_prefill_graphs` ← `_warmup_tensor_parallel_model` ← server "
                 "`__init__`", "`#0 all_reduce from …distributed_c10d.py:3174` … `#19 _run_module_as_main")
    (timeout,) = _kinds(_analyze(tmp_path, TORCHINFERNO))["collective_timeout"]
    stack = timeout.facts["stack"]
    assert len(stack) == 20 and stack[0] == "all_reduce" and stack[-1] == "_run_module_as_main"
    assert stack.index("_decode_linear_all_reduce") < stack.index("_attention_prefill_ragged") \
        < stack.index("_capture_ragged_prefill_logits_graph") < stack.index("_warmup_tensor_parallel_model") \
        < stack.index("__init__")
    assert "_decode_linear_all_reduce ← _attention_prefill_ragged" in timeout.text


def test_verl_two_ranks_in_different_collectives_are_a_desync(tmp_path: Path) -> None:
    _readme_says(VERL, "**Desync — the two ranks are in different collectives.**", "`WorkNCCL(SeqNum=2635, "
                 "OpType=ALLREDUCE", "`WorkNCCL(SeqNum=2667, OpType=_REDUCE_SCATTER_BASE")
    kinds = _kinds(_analyze(tmp_path, VERL))
    (timeout,) = kinds["collective_timeout"]
    assert "rank 0 (PG 0) in _REDUCE_SCATTER_BASE seq 2667" in timeout.text
    assert "rank 1 (PG 0) in ALLREDUCE seq 2635" in timeout.text and "a desync" in timeout.text
    assert "fatal_signal" in kinds  # both processes abort (SIGABRT)


def test_verl_times_are_placed_by_the_epoch_the_file_gives(tmp_path: Path) -> None:
    _readme_says(VERL, "SIGABRT epoch 1763469143 = 12:32:23 UTC", "stall from ≈20:02:23")
    analysis = _analyze(tmp_path, VERL)
    (timeout,) = _kinds(analysis)["collective_timeout"]
    assert timeout.at.strftime("%H:%M:%S") == "12:32:23"
    assert _hms(analysis.key_times.started) == "12:02:23"  # 20:02:23 at UTC+8
    (entry,) = analysis.timeline.manifest["inputs"]
    assert any("places them at UTC+08:00" in note for note in entry["notes"])


def test_a_log_whose_stamps_carry_no_zone_says_it_read_them_as_utc(tmp_path: Path) -> None:
    (entry,) = _analyze(tmp_path, SGLANG_DEATH).timeline.manifest["inputs"]
    assert "its stamps carry no zone: read as UTC unless incident.toml gives the host's time_zone" in entry["notes"]


def test_tutorial_rank1_never_joined_collective5(tmp_path: Path) -> None:
    _readme_says(TUTORIAL, "rank 1 never joined collective 5 (`nccl:all_reduce`, shape [3,4]) of the default PG")
    (verdict,) = _kinds(_analyze(tmp_path, TUTORIAL))["collective_verdict"]
    assert "Rank 1 of the group's 2 ranks never joined collective 5 (nccl:all_reduce)" in verdict.text
    assert "default_pg" in verdict.text


# -- journald/ ---------------------------------------------------------------------------------------

FEDORA = "fedora_journalctl_short_suspend_selinux_denial_nvrm_gsp_xid120_elided.log"
OPENCLAW = "openclaw_vllm_user_service_crashloop_restart2740_grep_n_prefixed.log"
SYSTEMCTL = "systemctl_status_two_competing_vllm_units_system_running_user_crashloop76_journal_tail.txt"


def test_fedora_xid120_is_a_gpu_fault(tmp_path: Path) -> None:
    _readme_says(FEDORA, "**GPU fault, not an inference hang.**", "`NVRM: Xid (PCI:0000:23:00): 120, GSP task "
                 "exception", "21:36:23")
    (xid,) = _kinds(_analyze(tmp_path, FEDORA))["gpu_xid_error"]
    assert "Xid 120 (PCI:0000:23:00)" in xid.text and _hms(xid.at) == "21:36:23"


CORPUS2 = Path(os.environ.get("FORENSICS_CORPUS2", Path(__file__).resolve().parents[2] / "shared" / "corpus2"))
SMEM = "sglang_npu_pd_2p1d_decode0_ready_then_smem_link_broken_2026-01-04.log"


@pytest.mark.skipif(not (CORPUS2 / "README.md").is_file(), reason=f"no corpus at {CORPUS2}")
def test_a_kernel_journal_of_another_day_is_read_not_dropped_as_a_forged_clock(tmp_path: Path) -> None:
    """Hundreds of log lines of one January hour beside ten kernel lines of an August evening: the
    kernel's lines agree with each other, so they are another day's evidence, kept and said to lie
    apart — never set aside as a forged clock while `checked` says no device fault was found."""
    _readme_says(FEDORA, "`NVRM: Xid (PCI:0000:23:00): 120", "21:36:23")
    bundle = _bundle(tmp_path, FEDORA)
    (logs := bundle / "logs").mkdir()
    (source,) = CORPUS2.rglob(SMEM)
    shutil.copy(source, logs / SMEM)
    analysis = analyze(bundle, tmp_path / "case")
    assert analysis.timeline.out_of_range is None
    (xid,) = _kinds(analysis)["gpu_xid_error"]
    assert "Xid 120 (PCI:0000:23:00)" in xid.text and _hms(xid.at) == "21:36:23"
    assert any(line.endswith("found: device fault") for line in analysis.checked())
    assert any(note.startswith(f"journal/{FEDORA}: its times") and "check that it belongs to this incident" in note
               for note in analysis.timeline.incident.notes)


def test_openclaw_is_a_crash_loop_with_its_restart_counter(tmp_path: Path) -> None:
    _readme_says(OPENCLAW, "**Crash loop at startup, not a hang.**", "restart counter **2740 → 2741**",
                 "`ValueError: Free memory on device cuda:0 (0.32/23.56 GiB)")
    kinds = _kinds(_analyze(tmp_path, OPENCLAW))
    (loop,) = kinds["crash_loop"]
    assert "restart counter at 2741" in loop.text
    assert any("ValueError: Free memory on device" in f.text for f in kinds["error_records"])


def test_openclaw_crash_loop_names_its_unit_its_times_and_why_each_start_died(tmp_path: Path) -> None:
    _readme_says(OPENCLAW, "User unit `openclaw-vllm.service`", "between 17:41:29 and 17:41:45",
                 "each start fails `ValueError: Free memory on device cuda:0")
    (loop,) = _kinds(_analyze(tmp_path, OPENCLAW))["crash_loop"]
    assert loop.text.startswith("crash loop: openclaw-vllm.service restarted again and again")
    assert (_hms(loop.at), _hms(loop.until)) == ("17:41:29", "17:41:45")
    assert "First error of each start:" in loop.text and "ValueError: Free memory on device cuda:0" in loop.text


def test_systemctl_status_is_read_in_the_zone_its_active_line_names(tmp_path: Path) -> None:
    _readme_says(SYSTEMCTL, "`vllm-assistant.service` **running** since 06:35:31 AEST", "restart counter **76** at "
                 "06:55:53", "journal in AEST (Feb 22 06:55:xx = 20:55 UTC)")
    analysis = _analyze(tmp_path, SYSTEMCTL)
    (entry,) = analysis.timeline.manifest["inputs"]
    assert entry["format"] == "systemctl_status" and entry["quarantined"] == 0
    events = analysis.timeline.events
    running = events.filter(pl.col("message").str.starts_with("systemctl status vllm-assistant.service"))
    assert running.get_column("ts").to_list()[0].strftime("%H:%M:%S") == "20:35:31"  # 06:35:31 AEST
    assert "active (running)" in running.get_column("message").to_list()[0]
    (loop,) = _kinds(analysis)["crash_loop"]
    assert loop.text.startswith("crash loop: openclaw-vllm.service restarted again and again — systemd's restart "
                                "counter at 76")
    assert _hms(loop.at) == "20:55:53"


# -- logs/ -------------------------------------------------------------------------------------------

SGLANG_DEATH = "sglang_dgx_spark_nvfp4_silent_death_during_cuda_graph_capture_resource_tracker_warning.log"
VLLM_DEATH = "vllm_0.25.1_dgx_spark_nvfp4_load_then_silent_death_oom_no_error_line.log"
VLLM_KV = "vllm_0.25_dgx_spark_int4_startup_kv_cache_too_small_valueerror_engine_core_init_failed.log"


@pytest.mark.parametrize(("name", "last"), [(SGLANG_DEATH, "21:51:16"), (VLLM_DEATH, "17:49:34")])
def test_a_log_that_ends_with_no_error_is_a_silent_death_at_its_last_line(tmp_path: Path, name: str,
                                                                         last: str) -> None:
    _readme_says(name, "**Silent death", f"ast {'timestamp' if name == SGLANG_DEATH else 'line'} {last}**")
    (death,) = _kinds(_analyze(tmp_path, name))["silent_death"]
    assert _hms(death.at) == last and "during start-up" in death.text


def test_vllm_kv_cache_too_small_is_a_startup_failure_with_its_error(tmp_path: Path) -> None:
    _readme_says(VLLM_KV, "**Startup failure with a clear error (not a hang).**", "21:49:23", "Start 21:02:48")
    analysis = _analyze(tmp_path, VLLM_KV)
    kinds = _kinds(analysis)
    (failure,) = kinds["startup_failure"]
    assert _hms(failure.at) == "21:49:23" and "begun 21:02:48" in failure.text
    assert any("18.35 GiB KV cache is needed" in f.text for f in kinds["traceback"])
    assert "frozen" not in kinds and "silent_hang" not in kinds


# -- metrics/: healthy controls, invalid lines flagged, never a crash --------------------------------

@pytest.mark.parametrize(("name", "samples", "quarantined"), [
    ("dcgm_exporter_ericsson_t4_under_load_util91_no_help_type.prom", 20, 0),
    ("dcgm_exporter_lke_rtx4000ada_hpa_load_k8s_pod_labels_port_forward_line.prom", 25, 1),
    ("dcgm_exporter_viettel_2xl40s_grep_filtered_author_elided_labels_INVALID.prom", 2, 18),
])
def test_a_dcgm_scrape_of_a_healthy_host_is_no_incident_and_its_bad_lines_are_flagged(
        tmp_path: Path, name: str, samples: int, quarantined: int) -> None:
    analysis = _analyze(tmp_path, name)
    (entry,) = analysis.timeline.manifest["inputs"]
    assert entry["quarantined"] == quarantined
    assert analysis.timeline.samples.collect().height == samples
    assert not analysis.incident_found


def test_the_a800_scrape_with_a_text_value_quarantines_those_samples_and_is_healthy(tmp_path: Path) -> None:
    name = "dcgm_exporter_8xA800_mig_gpu0_3instances_error_value_string.prom"
    _readme_says(name, "**Healthy idle host**", "`DCGM_FI_DEV_VGPU_PER_PROCESS_UTILIZATION … ERROR - FAILED TO "
                 "CONVERT TO STRING`", "on all 10 series", "26 families, 233 samples")
    analysis = _analyze(tmp_path, name)
    (entry,) = analysis.timeline.manifest["inputs"]
    quarantine = analysis.timeline.quarantine
    assert entry["quarantined"] == 10 and quarantine.height == 10
    assert analysis.timeline.samples.collect().height + 10 == 233  # the README counts the bad ten among the samples
    assert analysis.timeline.samples.collect().get_column("name").n_unique() + 1 == 26  # the bad ones' family has no sample
    assert not analysis.incident_found


def test_the_2024_sglang_scrape_is_healthy_and_idle(tmp_path: Path) -> None:
    name = "sglang_2024_docs_gemma2_9b_name_label_old_metric_names_after_load.prom"
    _readme_says(name, "**Healthy, idle after a benchmark**", "now running 0, waiting 0")
    analysis = _analyze(tmp_path, name)
    (entry,) = analysis.timeline.manifest["inputs"]
    assert entry["quarantined"] == 0 and not analysis.incident_found
    running = analysis.timeline.samples.collect().filter(pl.col("name") == "sglang:num_requests_running")
    assert running.get_column("value").to_list() == [0.0]


# -- pyspy/: one incident dumped per node, and a control --------------------------------------------

def test_the_dp_controller_busy_polling_is_not_a_hang(tmp_path: Path) -> None:
    name = "sglang_ascend_data_parallel_controller_3dumps_busy_poll_active_gil_control.txt"
    _readme_says(name, "**Not a hang / control.**")
    analysis = _analyze(tmp_path, name)
    assert not analysis.incident_found
    assert "stuck_process" not in _kinds(analysis)


@pytest.mark.parametrize("name", ASCEND_SET)
def test_each_ascend_node_shows_its_rank_in_the_same_device_synchronize_every_round(tmp_path: Path,
                                                                                   name: str) -> None:
    _readme_says(name, "`synchronize (torch_npu/npu/streams.py:192)`" if name in ASCEND_SET[:2] else "same stack as DP1")
    (stuck,) = _kinds(_analyze(tmp_path, name))["stuck_process"]
    assert "synchronize" in stuck.text and "did not move" in stuck.text


@pytest.mark.parametrize("name", ASCEND_SET)
def test_one_process_one_verdict(tmp_path: Path, name: str) -> None:
    """Each node's rank stood in the same device synchronize in every round: a hang, said once."""
    _readme_says(name, {ASCEND_SET[0]: "Identical in all 5 samples (no progress)",
                        ASCEND_SET[1]: "identical ×3"}.get(name, "same stack as DP1"))
    kinds = _kinds(_analyze(tmp_path, name))
    assert len(kinds["stack_verdict"]) == 1  # the report shows the last round's, though every round has one mtime
    assert {f.facts["verdict"] for f in kinds["stack_verdict"]} == {"UNIFORM_WAIT"}
    assert not any("ORDINARY_WORK" in f.text or "not a hang" in f.text for f in kinds["stack_verdict"])


def test_a_last_dump_without_a_final_newline_is_whole(tmp_path: Path) -> None:
    name = ASCEND_SET[3]
    _readme_says(name, "**no trailing newline**", "×3")
    (entry,) = _analyze(tmp_path, name).timeline.manifest["inputs"]
    assert (entry["parsed"], entry["quarantined"]) == (3, 0)


def test_the_four_nodes_together_are_a_uniform_wait_at_the_device_level(tmp_path: Path) -> None:
    readme = " ".join((CORPUS3 / "README.md").read_text().split())
    assert "**Uniform wait at the device level**: no rank is missing at the Python level" in readme
    analysis = _analyze(tmp_path, *ASCEND_SET)
    verdicts = analysis.summary()["stack_verdicts"]
    assert len(verdicts) == 4 and {v["verdict"] for v in verdicts} == {"UNIFORM_WAIT"}
    # each DP group's first TP rank was dumped: none of them is missing from another group
    missing = {m["rank"] for v in verdicts for m in v["missing_ranks"]}
    assert not missing & {0, 8, 16, 24}


def test_the_batch_index_names_each_bundles_verdicts_with_the_culprits(tmp_path: Path) -> None:
    """Issue 53: the index showed "—" for collective timeouts; it names them and who never entered."""
    from forensics.report import _verdicts

    _readme_says(ACCELERATE, "Culprits = ranks 0 and 4")
    assert _verdicts(_analyze(tmp_path / "a", ACCELERATE).summary()) == \
        "collective timeout at seq 78: ranks 0, 4 never entered it"
    _readme_says(TUTORIAL, "rank 1 never joined collective 5")
    assert _verdicts(_analyze(tmp_path / "t", TUTORIAL).summary()) == "process group 0 (default_pg): STRAGGLER_OR_MISSING"


# -- the main track is called a wedge only where the evidence shows one ----------------------------

NOT_A_WEDGE = ("not a hang", "not an inference hang", "Not a hang", "Healthy", "healthy", "Silent death",
               "Crash loop", "Startup failure", "GPU fault", "Idle")
A_WEDGE = ("Desync", "Uniform wait")


def _verdict(name: str) -> str:
    """The bold phrase that opens the file's ground truth (the README's verdict), or ''."""
    (row,) = [line for line in (CORPUS3 / "README.md").read_text().splitlines() if f"`{name}`" in line]
    truth = row.rstrip(" |").rsplit("|", 1)[-1].strip()
    return truth[2:truth.index("**", 2)] if truth.startswith("**") else ""


@pytest.mark.parametrize("name", [p.name for p in _files()
                                  if any(word in _verdict(p.name) for word in NOT_A_WEDGE + A_WEDGE)])
def test_no_track_is_called_a_wedge_unless_the_evidence_shows_one(tmp_path: Path, name: str) -> None:
    verdict = _verdict(name)
    names = {track.name for track in _analyze(tmp_path, name).tracks}
    if any(word in verdict for word in A_WEDGE):
        assert "wedge" in names, verdict
    else:
        assert "wedge" not in names, verdict


_QUOTE = re.compile(r"“([^“”]*)”")
_STRAIGHT = str.maketrans({"“": '"', "”": '"', "‘": "'", "’": "'"})


@pytest.mark.parametrize("path", [p for p in _files() if p.parts[-2] in ("logs", "flight")], ids=lambda p: p.name)
def test_every_quote_in_a_finding_is_the_files_own_words_whole_or_cut_at_a_word_and_marked(
        tmp_path: Path, path: Path) -> None:
    """Item 8 of the verdict issue ("text cut mid-sentence"): what a finding's sentence quotes from
    a log is the file's own text, either whole or cut after a whole word with "…" saying so."""
    analysis = _analyze(tmp_path, path.name)
    text = path.read_text(errors="replace").translate(_STRAIGHT)
    words = " ".join(text.split())
    for finding in analysis.reported():
        for quote in _QUOTE.findall(finding.text):
            said = " ".join(quote.removesuffix("…").split())
            if not said or said.startswith(("<", "…")):
                continue
            # a line's template (errors' new_template) writes its numbers as <n>
            pattern = re.escape(said).replace(re.escape("<n>"), "[0-9][0-9.]*")
            found = re.search(pattern + "(?= |$)", words)  # whole words: a quote ends where a word does
            assert found, (finding.kind, quote)
