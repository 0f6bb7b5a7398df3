"""Serving engines' own words as users paste them (`tests/data/serving/`: real GitHub issue
excerpts, each cited with its ground truth in that folder's SOURCES.md): an engine's watchdog
timeout leads the first screen with the stall it implies, torch's newer wording of a collective
timeout is read, a native Gloo receive is a wait on a peer, and a dump's own time is not
outvoted by the copies' modification times. Each expected value is first found in the sample's
SOURCES.md row (`_ground_truth`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl

from forensics.analyze import Analysis, analyze
from forensics.detect.failures import headline
from forensics.render.postmortem import brief
from tests.conftest import sample_says

SAMPLES = Path(__file__).resolve().parents[1] / "data" / "serving"


def _ground_truth(name: str, *facts: str) -> None:
    sample_says(SAMPLES, name, *facts)


def _analyze(tmp_path: Path, *names: str) -> Analysis:
    logs = tmp_path / "bundle" / "logs"
    logs.mkdir(parents=True)
    for name in names:
        shutil.copy(SAMPLES / name, logs / name)
    return analyze(tmp_path / "bundle", tmp_path / "case")


def test_every_sample_is_cited_and_every_cited_sample_is_here() -> None:
    rows = [line.split("|")[1].strip() for line in (SAMPLES / "SOURCES.md").read_text().splitlines()
            if line.startswith("| ") and ".log |" in line]
    assert sorted(rows) == sorted(p.name for p in SAMPLES.glob("*.log"))


def test_the_watchdogs_timeouts_lead_and_say_since_when_the_engine_stalled(tmp_path: Path) -> None:
    name = "sglang_tp8_watchdog_timeout_sigquit_killed.log"
    _ground_truth(name, "All 8 local schedulers hit SGLang's watchdog (no forward progress for 300 s)",
                  "the hang began ≈00:52:15", "the SIGQUIT their consequence")
    first = headline(_analyze(tmp_path, name).findings)[0]
    assert first.kind == "watchdog_timeout"
    assert (first.facts["waited_s"], first.facts["stalled_since"]) == (300.0, "2025-03-09T00:52:15+00:00")
    assert sorted(first.facts["tags"]) == [f"TP{n}" for n in range(8)]


def test_a_watchdog_timeout_behind_green_answers_is_no_healthy_engine(tmp_path: Path) -> None:
    name = "sglang_tp3_watchdog_timeout_while_http_200_spliced_line.log"
    _ground_truth(name, "no progress for 300 s (since ≈19:19:30) while the HTTP server still answered 200")
    analysis = _analyze(tmp_path, name)
    first = headline(analysis.findings)[0]
    assert first.kind == "watchdog_timeout" and first.facts["stalled_since"] == "2025-08-02T19:19:30+00:00"
    said = brief(analysis)
    assert "No engine froze" not in said and "stalled since about 19:19:30" in said


def test_torchs_own_rank_dump_signal_is_a_collective_timeout(tmp_path: Path) -> None:
    name = "sglang_nccl_dump_signal_from_this_local_rank.log"
    _ground_truth(name, "due to a collective timeout from this local rank", "**a collective timeout**")
    found = [f for f in _analyze(tmp_path, name).findings if f.kind == "collective_timeout"]
    assert found and found[0].at is not None and found[0].at.strftime("%H:%M:%S") == "08:45:31"


def test_a_pipeline_stage_waiting_in_glooss_receive_waits_on_a_peer(tmp_path: Path) -> None:
    a, b = "sglang_pp_watchdog_pyspy_gloo_recv_excerpt_a.log", "sglang_pp_watchdog_pyspy_recv_object_excerpt_b.log"
    _ground_truth(a, "13:12:37 (2026-01-29)", "MainThread idle in gloo RecvWork::wait (waiting for its previous stage)",
                  "One round of dumps")
    _ground_truth(b, "without a `Process` header")
    analysis = _analyze(tmp_path, a, b)
    stage = [f for f in analysis.findings if f.kind == "stack_verdict" and f.at is not None
             and f.at.strftime("%Y-%m-%d %H:%M:%S") == "2026-01-29 13:12:37"]
    # the dump's own time is kept although the other excerpt has only its copy's modification time
    assert len(stage) == 1, [(f.at, f.text[:80]) for f in analysis.findings if f.kind == "stack_verdict"]
    assert stage[0].facts["verdict"] == "STRAGGLER_OR_MISSING"
    # the watchdog's line between the dumps is read as a log line: the stage that fired is named
    _ground_truth(a, "PP1 TP1's hard scheduler watchdog fires")
    (fired,) = [f for f in analysis.findings if f.kind == "watchdog_timeout"]
    assert fired.facts["tags"] == ["PP1 TP1"] and fired.facts["waited_s"] == 300.0
    assert "waitRecv" in stage[0].text and "one round of dumps" in stage[0].text.lower() + brief(analysis).lower()


def test_vllms_engine_core_prefix_chooses_its_profile_and_its_wait_says_since_when(tmp_path: Path) -> None:
    """vLLM's own words leave it open ("hanging or doing some time-consuming work (e.g. compilation)"):
    the wait and since when are said, no stall is claimed from it."""
    name = "vllm_v1_dp2_shm_broadcast_no_block_60s.log"
    _ground_truth(name, "(EngineCore_DP1 pid=1455)", "DP1 since ≤14:43:28", "(or very slow)")
    analysis = _analyze(tmp_path, name)
    assert analysis.profile_matched and analysis.timeline.profile.name == "vllm"
    (waited,) = [f for f in analysis.findings if f.kind == "engine_wait_timeout"]
    assert waited.facts["waited_s"] == 60.0 and waited.facts["stalled_since"][11:19] == "14:43:28"
    assert "waiting since about 14:43:28" in brief(analysis) and "stalled" not in waited.text


def test_a_dump_in_a_docker_compose_log_is_read_without_its_prefix(tmp_path: Path) -> None:
    name = "sglang_compose_watchdog_pyspy_tp6_eagle_verify.log"
    _ground_truth(name, "`sglang-1  | ` before every line", "MainThread ACTIVE in penaltylib min_new_tokens `_apply`",
                  "not a collective wait", "One snapshot of one rank: cannot call desync or freeze")
    analysis = _analyze(tmp_path, name)
    frames = analysis.timeline.stacks.filter(pl.col("title") == "sglang::scheduler_TP6")
    assert frames.height and not frames.filter(pl.col("function").str.contains("sglang-1")).height
    top = frames.filter(pl.col("thread_name") == "MainThread").sort("depth").row(0, named=True)
    assert top["function"] == "_apply" and top["file"].endswith("min_new_tokens.py")
    (tp6,) = [f for f in analysis.findings if f.kind == "stack_verdict" and f.facts.get("ranks") == [6]]
    assert tp6.facts["verdict"] == "ORDINARY_WORK" and tp6.at is not None  # one snapshot of work: no hang said
    assert tp6.at.strftime("%Y-%m-%d %H:%M:%S") == "2025-10-29 11:25:58"
    # the watchdog's own line between the dumps is read as the log line it is, and leads
    _ground_truth(name, "TP3 watchdog at 11:25:58")
    first = headline(analysis.findings)[0]
    assert first.kind == "watchdog_timeout" and first.facts["tags"] == ["TP3"] and first.at is not None
    assert first.at.strftime("%Y-%m-%d %H:%M:%S") == "2025-10-29 11:25:58"
    (entry,) = analysis.timeline.manifest["inputs"]
    assert (entry["records"], entry["parsed"], entry["quarantined"]) == (3, 3, 0)  # two dumps and the log line
