"""Dumps that failed are named: which process py-spy could not see is a fact of the stack verdict
(`facts["not_dumped"]`, `missing_ranks` in summary.json) and a sentence of its text, never dropped.
Ground truth: ../shared/corpus2/README.md — sgl-project/sglang#30453, where SGLang's watchdog logs
two `Pyspy failed (…--pid 163686)` attempts and `All pyspy dump attempts failed for PID 163686.`
(the peer rank, already aborted), and the Jean Zay notes, where `py-spy dump --pid 280058` failed
with EPERM on the rank in uninterruptible sleep."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from forensics.analyze import analyze
from forensics.detect.stacks import judge, latest
from forensics.sources.pyspy import pyspy_text

CORPUS2 = Path(os.environ.get("FORENSICS_CORPUS2", Path(__file__).resolve().parents[3] / "shared" / "corpus2"))
pytestmark = pytest.mark.skipif(not (CORPUS2 / "README.md").is_file(), reason=f"no corpus at {CORPUS2}")
NPU = CORPUS2 / "pyspy" / "sglang_issue30453_npu_watchdog_pyspy_native_aarch64_plus_failed_attempts.txt"
EPERM = CORPUS2 / "pyspy" / "m4_jeanzay_eperm_failed_to_suspend_Dstate_rank0.txt"


def _stack_verdicts(tmp_path: Path, source: Path) -> list:
    bundle = tmp_path / "bundle" / "stacks"
    bundle.mkdir(parents=True)
    shutil.copy(source, bundle / source.name)
    analysis = analyze(bundle.parent, tmp_path / "case")
    return [f for f in analysis.findings if f.kind == "stack_verdict"]


def test_every_failed_attempt_is_a_quarantined_record_naming_the_pid() -> None:
    text = NPU.read_text()
    assert text.count("--pid 163686). Error:") == 2 and "All pyspy dump attempts failed for PID 163686." in text
    result = pyspy_text.parse(NPU)
    assert result.quarantine.get_column("subject").to_list() == ["pid=163686"] * 3
    assert result.records == result.parsed + result.quarantine.height == 4


def test_the_peer_that_could_not_be_dumped_is_in_the_verdicts_facts_and_text(tmp_path: Path) -> None:
    """The README: "The peer rank TP1 (PID 163686) could not be dumped"; the file itself names only its
    PID, so the verdict names the PID (a rank would be a guess)."""
    readme = " ".join((CORPUS2 / "README.md").read_text().split())
    assert "The peer rank TP1 (PID 163686) could not be dumped" in readme
    (finding,) = _stack_verdicts(tmp_path, NPU)
    (failed,) = finding.facts["not_dumped"]
    assert failed["pid"] == 163686 and "Failed to get stack traces" in failed["reason"]
    assert "PID 163686 could not be dumped" in finding.text
    assert finding.facts["ranks"] == [0]  # TP0, dumped, is judged in the same group as its failed peer


def test_a_rank_named_by_its_header_is_said_with_its_pid(tmp_path: Path) -> None:
    """A collector's capture header names the title of a process whose dump failed (py-spy's EPERM
    output, as the Jean Zay notes show it): the sentence says which rank and which PID."""
    lines = EPERM.read_text().splitlines()
    error = next(line for line in lines if line.startswith("Error: "))
    assert error == "Error: Failed to suspend process"
    ok = ("# capture ts=2026-06-18T21:40:10Z pid=101 group=decode title=sglang::scheduler_TP0\n"
          "Process 101: sglang::scheduler_TP0\nPython v3.11.7 (/usr/bin/python3.11)\n\n"
          'Thread 101 (idle): "MainThread"\n    all_reduce (torch/distributed/distributed_c10d.py:2501)\n\n')
    failed = ("# capture ts=2026-06-18T21:40:10Z pid=280058 group=decode title=sglang::scheduler_TP1\n"
              + "\n".join(lines[lines.index(error):]) + "\n")
    path = tmp_path / "stacks" / "round.txt"
    path.parent.mkdir()
    path.write_text(ok + failed)
    result = pyspy_text.parse(path)
    (v,) = latest(judge(result.rows, result.quarantine))
    (missing,) = v.missing
    assert (missing.rank, missing.pid, missing.failed) == (1, 280058, True)
    assert "rank 1 (PID 280058) could not be dumped" in v.explanation and "EPERM" in v.explanation


def test_only_failed_dumps_draw_no_verdict_and_still_name_the_process(tmp_path: Path) -> None:
    (finding,) = _stack_verdicts(tmp_path, EPERM)
    assert finding.facts["verdict"] == "NO_VERDICT"
    assert [f["pid"] for f in finding.facts["not_dumped"]] == [280058]
    assert "PID 280058 could not be dumped" in finding.text and "EPERM" in finding.text
