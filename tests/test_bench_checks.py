"""A benchmark checks the work it timed: run on a tiny input, each row's own check must pass (an
ingest that reads nothing fails instead of publishing the time of nothing)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(not Path("/lib/systemd/systemd-journal-remote").exists(), reason="systemd-journal-remote needed")
def test_journal_ingest_checks_every_row_on_a_tiny_input() -> None:
    done = subprocess.run([sys.executable, "-m", "bench", "journal_ingest"], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "BENCH_JOURNAL_ENTRIES": "1500"}, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| forensics ingest (export -> Parquet case), cold |" in done.stdout
    for fmt in ("export", ".journal", "JSON"):  # each input beside a peer reading the same input
        assert f"| {fmt} | forensics " in done.stdout


def test_a_bench_row_that_read_nothing_fails(tmp_path: Path) -> None:
    """The ingest row's check, given an empty bundle: the bench stops, naming what it did not read."""
    from bench.journal_ingest import INGEST

    (tmp_path / "bundle").mkdir()
    done = subprocess.run([sys.executable, "-c", INGEST, str(tmp_path / "bundle"), str(tmp_path / "case"), "1500"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode != 0 and "ingested 0 of 1500" in done.stderr
    shutil.rmtree(tmp_path / "case", ignore_errors=True)
