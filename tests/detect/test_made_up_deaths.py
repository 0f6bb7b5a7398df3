"""Deaths the verdict must not make up (issue 51, item 9b): an offline vLLM run (`LLM.generate`)
that prints its results and exits finished; it neither failed its start-up nor died.

The logs are real runs, copied from vllm-ascend's installation docs (tests/data/logs/SOURCES.md
names each file's source and ground truth); what a test expects is what those docs say of the run
(4 prompts processed and printed, "process exits after offline inference, and does not affect
actual inference"), never what the suite printed."""

from __future__ import annotations

import shutil
from pathlib import Path

from forensics.analyze import Analysis, analyze, is_anomaly
from forensics.render.text_report import report_text

DATA = Path(__file__).resolve().parents[1] / "data" / "logs"
V1_FINISHED = "vllm_0.18.0_ascend_v1_offline_generate_4_prompts_finished_shutdown.log"
V0_FINISHED = "vllm_0.7.1_ascend_offline_generate_4_prompts_finished.log"
V1_NO_SHUTDOWN = "vllm_0.15.1_v1_offline_generate_1_prompt_finished_no_shutdown_line.log"
MADE_UP = ("silent_death", "startup_failure", "startup_stall", "engine_dead", "worker_died")


def _analysis(tmp_path: Path, name: str) -> Analysis:
    folder = tmp_path / "bundle" / "logs" / "npu-node-00"
    folder.mkdir(parents=True)
    shutil.copy(DATA / name, folder / name)
    return analyze(tmp_path / "bundle", tmp_path / "case")


def test_the_sources_say_what_the_tests_assert() -> None:
    """The ground truth is the docs': four prompts printed, and (V1) the exit's lines after them."""
    sources = (DATA / "SOURCES.md").read_text()
    assert f"`{V1_FINISHED}`" in sources and f"`{V0_FINISHED}`" in sources
    for name in (V1_FINISHED, V0_FINISHED):
        text = (DATA / name).read_text()
        assert text.count(", Generated text: ") == 4 and "Processed prompts: 100%" in text
    assert "does not affect actual inference" in sources


def test_an_offline_run_that_shut_down_after_its_outputs_finished(tmp_path: Path) -> None:
    analysis = _analysis(tmp_path, V1_FINISHED)
    assert analysis.timeline.profile.name == "vllm"
    kinds = {f.kind for f in analysis.findings}
    assert not kinds & set(MADE_UP), [f.text for f in analysis.findings if f.kind in MADE_UP]
    # the engine core's own end is said, and the client's ERROR after it as the exit's consequence
    (end,) = [f for f in analysis.findings if f.kind == "run_finished"]
    assert end.at.strftime("%H:%M:%S") == "11:36:00" and not is_anomaly(end)
    (exit_line,) = [f for f in analysis.findings if "Engine core proc EngineCore died unexpectedly" in f.text]
    assert not is_anomaly(exit_line) and "not a fault" in exit_line.text
    assert not analysis.incident_found, [f.text for f in analysis.findings if is_anomaly(f)]
    assert "no incident found" in report_text(analysis)


def test_an_offline_run_whose_log_ends_after_its_outputs_finished(tmp_path: Path) -> None:
    analysis = _analysis(tmp_path, V0_FINISHED)
    assert not {f.kind for f in analysis.findings} & set(MADE_UP)
    assert not analysis.incident_found, [f.text for f in analysis.findings if is_anomaly(f)]


def test_an_offline_run_that_ends_after_its_text_without_a_shutdown_line_finished(tmp_path: Path) -> None:
    """The engine core's "init engine … took 1.71 seconds" ended its start-up; the run then printed
    its one prompt's text and the script ended: not a death during start-up."""
    text = (DATA / V1_NO_SHUTDOWN).read_text()
    assert "Processed prompts: 100%" in text and "| 1/1 [" in text and "Shutdown" not in text
    analysis = _analysis(tmp_path, V1_NO_SHUTDOWN)
    assert analysis.timeline.profile.name == "vllm"
    assert not {f.kind for f in analysis.findings} & set(MADE_UP), [f.text for f in analysis.findings]
    assert not analysis.incident_found, [f.text for f in analysis.findings if is_anomaly(f)]
