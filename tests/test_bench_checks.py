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


def test_pyspy_bench_checks_every_row_on_a_tiny_input() -> None:
    done = subprocess.run([sys.executable, "-m", "bench", "pyspy_parse"], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "BENCH_PYSPY_DUMPS": "3"}, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| forensics text -> stacks |" in done.stdout and "| json.load + loop over frames |" in done.stdout


def test_a_pyspy_row_that_read_other_frames_than_the_input_holds_fails(tmp_path: Path) -> None:
    from bench.pyspy_parse import OURS

    dump = tmp_path / "one.txt"
    dump.write_text('Process 1: python x.py\nPython v3.11.2 (/usr/bin/python3)\n\n'
                    'Thread 1 (idle): "MainThread"\n    wait (threading.py:320)\n    main (x.py:3)\n')
    ok = subprocess.run([sys.executable, "-c", OURS, "pyspy_text", str(dump), "2"], capture_output=True, text=True,
                        cwd=ROOT)
    assert ok.returncode == 0, ok.stderr
    wrong = subprocess.run([sys.executable, "-c", OURS, "pyspy_text", str(dump), "3"], capture_output=True,
                           text=True, cwd=ROOT)
    assert wrong.returncode != 0 and "read 2 frames of 3" in wrong.stderr


def test_object_store_bench_alternates_rounds_and_checks_each_on_a_tiny_fleet() -> None:
    pytest.importorskip("s3fs")
    done = subprocess.run([sys.executable, "-m", "bench", "object_store"], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "BENCH_OBJECT_STORE_HOSTS": "2", "BENCH_OBJECT_STORE_SCALE": "1",
                               "BENCH_ROUNDS": "2"}, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 alternating rounds" in done.stdout
    for row in ("| on local disk |", "| in S3 (SeaweedFS, loopback) |"):
        (line,) = [line for line in done.stdout.splitlines() if line.startswith(row)]
        assert len(line.split("|")[5].split(" / ")) == 2  # every run listed


@pytest.mark.parametrize("bench", ["analyze_reference", "analyze_profile"])
def test_reference_benches_check_their_answers_on_the_small_reference(bench: str) -> None:
    """At scale 1 (~10 k entries) each row still checks its answer: the analysis finds decode frozen
    at 21:34:47 with TP_DESYNC, the query both units, the phases add up to the analysis."""
    done = subprocess.run([sys.executable, "-m", "bench", bench], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "BENCH_REFERENCE_SCALE": "1", "BENCH_ROUNDS": "1"}, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    if bench == "analyze_reference":
        assert "| forensics analyze, cold: whole process" in done.stdout
    else:
        assert "| **analyze, in process** |" in done.stdout and "| &nbsp;&nbsp;decompress |" in done.stdout
