"""Real evidence written by other people (`../shared/corpus/`, kept outside the repository): every
file goes through ingest and analyze as a user would drop it into a bundle, with no traceback, and
gives what a careful human reads from it (the corpus README's ground truth, written down here per
file). Skipped when the corpus folder is not beside the checkout (`FORENSICS_CORPUS` points
elsewhere)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from forensics.analyze import Analysis, analyze, summary_problems
from forensics.case import read_bundle
from forensics.detect import progress
from forensics.detect.stacks import latest

CORPUS = Path(os.environ.get("FORENSICS_CORPUS", Path(__file__).resolve().parents[2] / "shared" / "corpus"))
pytestmark = pytest.mark.skipif(not (CORPUS / "README.md").is_file(), reason=f"no corpus at {CORPUS}")
# Where a user would put each kind in a bundle.
FOLDER = {"pyspy": "stacks", "logs": "logs", "journald": "journal", "prometheus": "metrics"}


def _files() -> list[Path]:
    if not CORPUS.is_dir():
        return []
    return sorted(p for p in CORPUS.rglob("*") if p.is_file() and p.parent.name != "formats"
                  and p.name not in ("README.md", "EXPECTED_ERRORS.tsv"))


def _bundle(tmp_path: Path, source: Path) -> Path:
    kind = source.relative_to(CORPUS).parts[0]
    bundle = tmp_path / "bundle"
    (bundle / FOLDER[kind]).mkdir(parents=True)
    shutil.copy(source, bundle / FOLDER[kind] / source.name)
    return bundle


def _analyze(tmp_path: Path, name: str) -> tuple[Analysis, dict[str, Any]]:
    (source,) = [p for p in _files() if p.name == name]
    analysis = analyze(_bundle(tmp_path, source), tmp_path / "case")
    return analysis, analysis.timeline.manifest


@pytest.mark.parametrize("source", _files(), ids=lambda p: str(p.relative_to(CORPUS)))
def test_every_file_is_read_quarantined_or_skipped_with_a_reason(tmp_path: Path, source: Path) -> None:
    analysis = analyze(_bundle(tmp_path, source), tmp_path / "case")  # no traceback, whatever the file
    manifest = analysis.timeline.manifest
    for entry in manifest["inputs"]:
        assert entry["records"] == entry["parsed"] + entry["quarantined"]
    said = [e for e in manifest["inputs"] if e["parsed"] or e["quarantined"] or e.get("notes")]
    skipped = [s for s in manifest["skipped"] if s["reason"]]
    assert said or skipped, f"{source.name}: nothing read, nothing quarantined, no reason given"
    assert summary_problems(analysis.summary()) == []  # builds, and keeps to its published schema


# -- py-spy: processes, threads, the verdict and the frame that decides it -----------------------

PYSPY = {
    # file: (processes, threads, verdict, {frame function: ranks there})
    "sglang_pd_decode_dp_attention_multiprocess.txt": (11, 70, "UNIFORM_WAIT", {"synchronize": 8}),
    "vllm_enginecore_xpu_wedge_full.txt": (1, 7, "ORDINARY_WORK", {"build": 1}),
    "ros_py27_locals_hex_threadids.txt": (1, 28, "ORDINARY_WORK", {}),
    "mlengineering_single_mainthread_broadcast.txt": (1, 1, "STRAGGLER_OR_MISSING", {"broadcast": 1}),
    "mlengineering_two_threads_hex_ids.txt": (1, 2, "ORDINARY_WORK", {}),
    "bigscience_tr11_node48_node49_grouped_ranks.md.txt": (16, 16, "TP_DESYNC",
                                                           {"broadcast": 7, "all_reduce": 4, "recv": 4}),
    "bigscience_tr11_dataloader_deadlock_idle.txt": (1, 1, "WAITING_IN_ONE_SNAPSHOT", {"wait": 1}),
    # README: "2 Thread headers standing for 8 processes per node. 6 in train …, 2 in broadcast"
    "bigscience_hang_debug_6plus2_processes.txt": (2, 2, "TP_DESYNC", {"broadcast": 2, "train": 6}),
    "fetcher_unix_socket_with_ps_preamble.txt": (1, 1, "ORDINARY_WORK", {"wait_for_reply": 1}),
    "deadlock_lab_py312_truncated.txt": (1, 3, "WAITING_IN_ONE_SNAPSHOT", {}),
    "kitty_custom_exe_frozen_runpy.txt": (1, 1, "ORDINARY_WORK", {"_run_app": 1}),
    "kitty_native_frames_two_runs.txt": (1, 2, "ORDINARY_WORK", {"ppoll": 1}),
    # README: "Not one snapshot, so no desync verdict": no hang verdict may be drawn from it
    "sglang_native_dp_attention_annotated_fragments.txt": (1, 2, "NO_VERDICT", {"all_gather_into_tensor": 1}),
    "sglang_scheduler_afd_native_two_threads.txt": (1, 2, "ORDINARY_WORK", {}),
}


# Where the suite reads a dump otherwise than the README's ground truth today (issue 37): each a
# strict xfail naming the gap, so that it flips when the gap closes.
PYSPY_GAPS = {
    "bigscience_hang_debug_6plus2_processes.txt":
        "the counts the author wrote in prose (6 processes, 2 processes) are not read: 1 + 1 ranks are counted",
}


@pytest.mark.parametrize("name", sorted(PYSPY))
def test_pyspy_dumps_as_a_careful_reader_sees_them(tmp_path: Path, name: str, request: pytest.FixtureRequest) -> None:
    if name in PYSPY_GAPS:
        request.applymarker(pytest.mark.xfail(strict=True, reason=f"gap: {PYSPY_GAPS[name]}"))
    processes, threads, verdict, frames = PYSPY[name]
    analysis, manifest = _analyze(tmp_path, name)
    (entry,) = manifest["inputs"]
    assert (entry["format"], entry["quarantined"], entry["parsed"]) == ("pyspy_text", 0, processes)
    stacks = analysis.timeline.stacks
    heads = stacks.filter(pl.col("depth").fill_null(0) == 0)  # one row per thread
    assert heads.height == threads
    (v,) = latest(analysis.verdicts)
    assert v.verdict == verdict, v.explanation
    where = {}
    for rank in v.ranks:
        if rank.phase.frame is not None:
            where[rank.phase.frame.function] = where.get(rank.phase.frame.function, 0) + 1
    for function, count in frames.items():
        assert where.get(function) == count, (function, where)
    # the sentence names every rank of the table, and never contradicts it
    for ranks in v.ranks_by_phase.values():
        assert len(ranks) >= 1
    assert v.verdict in v.explanation
    if verdict in ("ORDINARY_WORK", "ALL_IDLE"):
        assert not analysis.incident_found  # a healthy process is no incident


def test_ros_dump_reads_locals_hex_ids_and_statuses(tmp_path: Path) -> None:
    analysis, _ = _analyze(tmp_path, "ros_py27_locals_hex_threadids.txt")
    heads = analysis.timeline.stacks.filter(pl.col("depth").fill_null(0) == 0)
    assert dict(heads.group_by("status").len().iter_rows()) == {"active": 25, "idle": 2, "active+gil": 1}
    assert heads.get_column("thread_name").null_count() == 28 and heads.get_column("thread_id").min() > 0xFFFFFFFF
    assert heads.get_column("python").unique().to_list() == ["2.7.17"]
    assert analysis.timeline.stacks.get_column("locals").drop_nulls().len() > 0


# -- SGLang server logs: the last progress line per scheduler tag ----------------------------------

LOGS = {
    # file: {(tag, kind): last line's time (the line's own clock)}
    "server_log_qwen3_0.6b_single_gpu_2025-08-08.log": {(None, "Prefill"): "2025-08-08 03:35:18",
                                                        (None, "Decode"): "2025-08-08 03:35:19"},
    "server_log_deepseek_tp8_k8s_lws_2025-02-17.log": {("TP0", "Prefill"): "2025-02-17 05:27:25"},
    "server_log_docker_desktop_double_timestamp_tqdm_2025-02-04.log": {("TP0", "Prefill"): "2025-02-04 05:29:21"},
    "server_log_skypilot_ray_prefix_dp2_tp2_2025-02-14.log": {("DP2 TP2", "Decode"): "2025-02-14 00:42:29"},
    "server_log_hybrid_mamba_minicpm_2026-03-03.log": {(None, "Prefill"): "2026-03-03 11:39:20",
                                                       (None, "Decode"): "2026-03-03 11:39:23"},
    "server_log_torchao_blog_markdown_escaped_2024-12-20.log": {("TP0", "Prefill"): "2024-12-20 12:42:16",
                                                                ("TP0", "Decode"): "2024-12-20 12:45:38"},
    "server_log_disagg_dp_tp_ep_tags_quoted_2025-11-04.log": {("DP0 TP0 EP0", "Prefill"): "2025-11-04 05:31:43",
                                                              ("DP31 TP31 EP31", "Decode"): "2025-11-04 05:32:32",
                                                              ("TP0", "Prefill"): "2025-11-04 07:07:07"},
}


@pytest.mark.parametrize("name", sorted(LOGS))
def test_server_logs_give_each_schedulers_last_progress(tmp_path: Path, name: str) -> None:
    analysis, manifest = _analyze(tmp_path, name)
    (entry,) = manifest["inputs"]
    assert entry["format"] == "server_log" and entry["quarantined"] == 0
    last = (progress.progress_lines(analysis.timeline).group_by("tag", "progress")
            .agg(pl.col("ts").max().dt.strftime("%Y-%m-%d %H:%M:%S")))
    assert {(tag, kind): at for tag, kind, at in last.iter_rows()} == LOGS[name]
    # no file holds an error, a warning, a traceback, a timeout or an abort: no incident is made up
    assert not analysis.incident_found, [f.text for f in analysis.findings]
    if name.startswith("server_log_deepseek_tp8"):  # TP1–TP7 log no batch lines: not frozen for that
        assert analysis.timeline.events.filter(pl.col("ready")).height == 1


# -- journald samples -------------------------------------------------------------------------------

JOURNALD = {
    # file: (records, parsed, quarantined, first quarantine reason's words or None)
    "systemd_doc_export_two_text_entries.export": (2, 2, 0, None),
    "systemd_doc_export_binary_field.DERIVED_BYTES.export": (1, 1, 0, None),
    "systemd_doc_export_binary_field_CARET_NOTATION.txt": (1, 0, 1, "runs past end of file"),
    "victorialogs_export_python_send_binary_message.export": (1, 1, 0, None),
    "MALFORMED_victorialogs_binary_len_too_short.export": (1, 0, 1, "runs past end of file"),
    "MALFORMED_victorialogs_binary_len_too_long.export": (1, 0, 1, "not followed by a newline"),
    "edge_victorialogs_two_entries_no_trailing_blank.export": (2, 2, 0, None),
    "edge_victorialogs_empty_field_name_no_final_newline.export": (1, 0, 1, "invalid field name 'a'"),
    "edge_victorialogs_empty_field_name_after_valid_entry.export": (2, 1, 1, "empty field name"),
    "edge_victorialogs_field_name_starting_with_digit.export": (2, 1, 1, "starts with a digit"),
    "edge_victorialogs_field_name_invalid_chars.export": (1, 0, 1, "invalid field name"),
    "systemd_doc_json_example_arrays_null.json": (1, 1, 0, None),  # README: "1 entry … Well-formed."
    "vector_fake_journalctl_json_arrays.jsonl": (7, 7, 0, None),
    "fedora_real_journalctl_o_json_line.jsonl": (1, 1, 0, None),
    "sysstat_real_journalctl_o_json_line_unreflowed.jsonl": (1, 1, 0, None),
    "incus_os_journal_entry_selinux_newline_SORTEDKEYS.json": (1, 1, 0, None),
}
MESSAGES = {
    "systemd_doc_export_binary_field.DERIVED_BYTES.export": "foo\nbar",
    "victorialogs_export_python_send_binary_message.export": "foo\nbar\n\n\nasda\nasda",
    "fedora_real_journalctl_o_json_line.jsonl": "setroubleshootd.service: Deactivated successfully.",
    "sysstat_real_journalctl_o_json_line_unreflowed.jsonl":
        "Finished sysstat-collect.service - system activity accounting tool.",
}


JOURNALD_GAPS: dict[str, str] = {}


@pytest.mark.parametrize("name", sorted(JOURNALD))
def test_journald_samples_count_as_their_format_says(tmp_path: Path, name: str, request: pytest.FixtureRequest) -> None:
    if name in JOURNALD_GAPS:
        request.applymarker(pytest.mark.xfail(strict=True, reason=f"gap: {JOURNALD_GAPS[name]}"))
    records, parsed, quarantined, reason = JOURNALD[name]
    (source,) = [p for p in _files() if p.name == name]
    frames, manifest = read_bundle(_bundle(tmp_path, source))
    (entry,) = manifest["inputs"]
    assert (entry["records"], entry["parsed"], entry["quarantined"]) == (records, parsed, quarantined)
    if reason:
        assert reason in frames["quarantine"].get_column("reason")[0]
    if name in MESSAGES:
        assert frames["events"].get_column("message").to_list()[0] == MESSAGES[name]
    if name == "edge_victorialogs_two_entries_no_trailing_blank.export":
        assert frames["events"].get_column("priority").to_list() == [3, None]
        assert "without its blank line" in entry["notes"][0]
    if name == "vector_fake_journalctl_json_arrays.jsonl":  # two entries share cursor "2": both kept
        assert frames["events"].get_column("__CURSOR").to_list().count("2") == 2


# -- Prometheus expositions: promtool's verdict, at its line --------------------------------------

def _promtool_truth() -> dict[str, tuple[str, int | None]]:
    """Per file, from the README: ("accepted", None) or ("rejected", line promtool names)."""
    truth: dict[str, tuple[str, int | None]] = {}
    if not CORPUS.is_dir():
        return truth
    for row in (CORPUS / "README.md").read_text().splitlines():
        cells = [c.strip() for c in row.split("|")]
        if len(cells) < 5 or not cells[1].startswith("`"):
            continue
        name, said = cells[1].strip("`"), cells[-2]
        if "**accepted**" in said or ("accepted" in said and "rejected" not in said):
            truth[name] = ("accepted", None)
        elif (found := re.search(r"rejected(?:, same|[,:] `line (\d+))", said)) is not None:
            line = found[1] or re.search(r"`line (\d+)", said)[1]
            truth[name] = ("rejected", int(line))
    return truth


PROMTOOL = _promtool_truth()
# OpenMetrics files: promtool's `check metrics` reads only the text format, so it rejects them at
# their first OpenMetrics construct; they are judged as OpenMetrics here (samples per the spec).
OPENMETRICS = {"prometheus_promtool_dump-openmetrics-roundtrip-test.om.txt": 14,
               "prometheus_textparse_1histogram.om.txt": 42,
               "prometheus_textparse_alltypes.5mfs.om.txt": 53}


@pytest.mark.parametrize("name", sorted(PROMTOOL))
def test_expositions_are_judged_like_promtool(tmp_path: Path, name: str) -> None:
    verdict, line = PROMTOOL[name]
    (source,) = [p for p in _files() if p.name == name]
    frames, manifest = read_bundle(_bundle(tmp_path, source))
    (entry,) = manifest["inputs"]
    assert entry["format"] == "prometheus_text"
    quarantine = frames["quarantine"].sort("line")
    if name in OPENMETRICS:
        assert frames["samples"].height == OPENMETRICS[name] and quarantine.height == 0
    elif verdict == "accepted":
        assert quarantine.height == 0, quarantine.select("line", "reason").rows()
        assert entry["parsed"] == entry["records"]
    else:
        assert quarantine.height >= 1
        assert quarantine.get_column("line")[0] == line, quarantine.select("line", "reason").rows()


def test_every_exposition_in_the_corpus_has_a_promtool_verdict() -> None:
    files = [p.name for p in _files() if p.relative_to(CORPUS).parts[0] == "prometheus"]
    assert files and set(files) <= set(PROMTOOL)


def test_the_sglang_metrics_paste_loads_whole(tmp_path: Path) -> None:
    (source,) = [p for p in _files() if p.name == "metrics_sglang_production_metrics_doc_llama3.1-8b.prom"]
    frames, _ = read_bundle(_bundle(tmp_path, source))
    samples = frames["samples"]
    assert samples.select(pl.col("family").cast(pl.String).n_unique()).item() == 12
    assert samples.filter(pl.col("name").cast(pl.String).str.starts_with("sglang:")).height == samples.height
