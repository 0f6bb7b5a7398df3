"""A py-spy dump's own header dates it: SGLang's watchdog writes `[2026-07-07 07:20:50] Pyspy dump
for PID n (…):` before each dump (python/sglang/srt/utils/common.py, `pyspy_dump_schedulers`), and
that stamp, not the file's modification time, is when the dump was taken. The stamp carries no zone:
it is read as UTC, with the confidence a zone-less capture header gets, and the input's notes say so.
Ground truth: ../shared/corpus2/README.md (the `pyspy/` rows of sgl-project/sglang#30453 and of the
SGLang docs page with two soft-watchdog dumps)."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from forensics.sources.pyspy import pyspy_text

CORPUS2 = Path(os.environ.get("FORENSICS_CORPUS2", Path(__file__).resolve().parents[3] / "shared" / "corpus2"))
pytestmark = pytest.mark.skipif(not (CORPUS2 / "README.md").is_file(), reason=f"no corpus at {CORPUS2}")
NPU = CORPUS2 / "pyspy" / "sglang_issue30453_npu_watchdog_pyspy_native_aarch64_plus_failed_attempts.txt"
DOCS = CORPUS2 / "pyspy" / "sglang_docs_soft_watchdog_native_dumps_ipykernel_and_scheduler_hfhub_INDENTED.txt"


def _dumps(path: Path) -> pl.DataFrame:
    result = pyspy_text.parse(path)
    return result.rows.group_by("pid").agg(pl.col("ts", "ts_source", "ts_confidence").first()).sort("ts")


def test_the_watchdog_stamp_is_the_dumps_capture_time_not_the_files_mtime() -> None:
    """The README's log row: "py-spy dump of TP0 07:20:50" (PID 163685, the file's first line)."""
    readme = " ".join((CORPUS2 / "README.md").read_text().split())
    assert "py-spy dump of TP0 07:20:50" in readme
    (row,) = _dumps(NPU).iter_rows(named=True)
    assert row["pid"] == 163685
    assert row["ts"] == datetime(2026, 7, 7, 7, 20, 50, tzinfo=UTC)
    # zone-less: read as UTC, "medium" as a zone-less capture header is (forensics.sources.common.snapshot_time)
    assert (row["ts_source"], row["ts_confidence"]) == ("header", "medium")


def test_each_dump_of_a_file_keeps_its_own_stamp_and_the_notes_say_utc() -> None:
    """Two dumps four seconds apart (the file's lines `[2026-03-27 20:52:54] Pyspy dump for PID 969538:`
    and `[2026-03-27 20:52:58] Pyspy dump for PID 972452:`, indented as the docs page shows them)."""
    text = DOCS.read_text()
    assert "    [2026-03-27 20:52:54] Pyspy dump for PID 969538:" in text
    assert "    [2026-03-27 20:52:58] Pyspy dump for PID 972452:" in text
    dumps = _dumps(DOCS)
    assert dumps.select("pid", "ts").rows() == [(969538, datetime(2026, 3, 27, 20, 52, 54, tzinfo=UTC)),
                                                (972452, datetime(2026, 3, 27, 20, 52, 58, tzinfo=UTC))]
    notes = pyspy_text.parse(DOCS).notes
    assert any("lines 1, 137" in n and "no zone: read as UTC" in n for n in notes)


def test_a_stamp_with_a_zone_is_exact(tmp_path: Path) -> None:
    """The same watchdog line with an offset (a logging format with `%z`): converted, and high confidence."""
    text = NPU.read_text().splitlines(keepends=True)
    assert text[0].startswith("[2026-07-07 07:20:50] ")
    path = tmp_path / "stacks.txt"
    path.write_text("[2026-07-07 07:20:50+08:00]" + text[0][len("[2026-07-07 07:20:50]"):] + "".join(text[1:200]))
    (row,) = _dumps(path).iter_rows(named=True)
    assert row["ts"] == datetime(2026, 7, 6, 23, 20, 50, tzinfo=UTC) and row["ts_confidence"] == "high"
