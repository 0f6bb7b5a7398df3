"""A lean timeline (what a big case gets: routine lines counted, not held; read batch by batch)
says exactly what the full one says: the same summary, the same report text, the same figures,
on the reference incident, on a fleet, and on a bundle whose traceback lines journald logged at
info priority — and the full timeline's memory is several times the lean one's."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

import forensics.timeline.align as align
import forensics.timeline.host_read as host_read
from forensics.analyze import Analysis, analyze
from forensics.render.text_report import report_text
from forensics.lab.reference import write_reference
from forensics.render import figures, lanes, swimlanes
from tests.conftest import REPO, export_entry

REFERENCE = REPO / "data" / "incidents" / "dsv4-pd-wedge-2026-06-18"


def _with_traceback(folder: Path) -> Path:
    """The reference, plus the decode scheduler printing a traceback on stdout (priority 6: journald
    cannot tell it from routine output) between two routine lines."""
    bundle = folder / "traceback"
    shutil.copytree(REFERENCE, bundle)
    lines = ["[2026-06-18 21:36:00 TP1] Cache flushed", "Traceback (most recent call last):",
             '  File "/sgl/scheduler.py", line 120, in event_loop_overlap', "    self.process_batch_result(batch)",
             "RuntimeError: NCCL communicator was aborted on rank 1.", "[2026-06-18 21:36:01 TP1] Cache flushed"]
    entries = [export_entry(("__CURSOR", f"s=t;i={i}"), ("__REALTIME_TIMESTAMP", str(1781818560000000 + i * 1000)),
                            ("__MONOTONIC_TIMESTAMP", str(90_000_000_000 + i * 1000)), ("_BOOT_ID", "c" * 32),
                            ("_HOSTNAME", "gpu-node-00"), ("_SYSTEMD_UNIT", "sglang-dsv4-decode.service"),
                            ("_PID", "4242"), ("PRIORITY", "6"), ("MESSAGE", line))
               for i, line in enumerate(lines)]
    (bundle / "journal" / "decode-stdout.export").write_bytes(b"".join(entries))
    return bundle


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("lean")
    return {"reference": REFERENCE, "fleet": write_reference(folder / "fleet", hosts=3),
            "traceback": _with_traceback(folder)}


def _analysis(bundle: Path, case: Path, lean: bool, monkeypatch: pytest.MonkeyPatch) -> Analysis:
    monkeypatch.setattr(align, "LEAN_ABOVE", -1 if lean else 10**12)
    # lean: batches of a prime size, so that each host is read in many, and gaps, clock steps and
    # counts cross batch ends the way they do in a big case
    monkeypatch.setattr(host_read, "LEAN_BATCH_ROWS", 997 if lean else host_read.LEAN_BATCH_ROWS)
    result = analyze(bundle, case)
    assert result.timeline.lean is lean
    return result


def _said(analysis: Analysis) -> dict[str, Any]:
    summary = analysis.summary()
    summary.pop("bundle")
    return {"summary": summary, "text": report_text(analysis),
            "timeline": swimlanes.timeline_figure(analysis).to_json(), "overview": figures.overview_figure(analysis)
            .to_json(), "errors": figures.errors_figure(analysis).to_json()}


@pytest.mark.parametrize("which", ["reference", "fleet", "traceback"])
def test_the_lean_timeline_says_what_the_full_one_says(bundles: dict[str, Path], tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch, which: str) -> None:
    full = _analysis(bundles[which], tmp_path / "full", False, monkeypatch)
    lean = _analysis(bundles[which], tmp_path / "lean", True, monkeypatch)
    said_full, said_lean = _said(full), _said(lean)
    for what in said_full:
        assert said_lean[what] == said_full[what], what
    # every line is counted, though the lean timeline holds only those worth a finding
    assert lean.timeline.activity.sort(lean.timeline.activity.columns).equals(
        full.timeline.activity.sort(full.timeline.activity.columns))
    assert lean.timeline.activity.get_column("lines").sum() == full.timeline.events.height
    assert lean.timeline.events.height < full.timeline.events.height
    assert lean.timeline.events.estimated_size() * 3 < full.timeline.events.estimated_size()
    if which == "traceback":
        assert "RuntimeError: NCCL communicator was aborted on rank 1." in said_lean["text"] or any(
            "NCCL communicator was aborted" in f["text"] for f in said_lean["summary"]["findings"])


def test_a_mark_finds_routine_lines_a_lean_timeline_keeps_no_text_of(bundles: dict[str, Path], tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """`session.mark(…)` searches text: on a lean timeline it searches the case, so a routine line
    (a router's request line, no text on the timeline) is still found, at the same time and lane."""
    import polars as pl

    where = pl.col("message").str.contains("[Router (Rust)] 2026-06-18 21:30:00 - DEBUG", literal=True)
    found = {}
    for lean in (False, True):
        analysis = _analysis(bundles["reference"], tmp_path / str(lean), lean, monkeypatch)
        events = analysis.timeline.events.with_columns(lanes.lane_expr())
        found[lean] = lanes.marked_rows(analysis, events, where)
    assert found[True].height >= 1
    assert found[True].equals(found[False])
    by_timeline = lanes.marked_rows(analysis, events, pl.col("component") == "decode")
    assert by_timeline.height > 0  # a column only the timeline has: searched there
