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
        assert "| forensics analyze, cold, of the bundle's journal export: whole process" in done.stdout
        assert "CPU-seconds per million entries, the whole analysis: " in done.stdout
        # the ratio over different inputs says so, and the like-for-like pair is printed beside it
        if shutil.which("lnav"):
            assert "DIFFERENT INPUTS" in done.stdout and "like for like, both from the host's .journal" in done.stdout
            for row in ("| like for like — forensics analyze from the host's .journal", "| like for like — lnav from"):
                assert row in done.stdout
    else:
        assert "| **analyze, in process** |" in done.stdout and "| &nbsp;&nbsp;decompress |" in done.stdout


def test_peak_memory_and_cpu_count_the_child_processes() -> None:
    """A shell whose child holds 200 MiB and spins: the tree's peak and CPU are the child's, not the shell's."""
    from bench.measure import run

    measured, _ = run("a child's memory", ["sh", "-c", f"{sys.executable} -c 'b = bytearray(200 << 20)\n"
                                           "for _ in range(3 * 10**6): b[0] = 1'; true"])
    assert measured.peak_mib >= 200 and measured.peak_anon_mib >= 200
    assert measured.cpu_seconds > 0.05


def test_a_command_that_fails_is_not_timed() -> None:
    from bench.measure import run

    with pytest.raises(RuntimeError, match="exit status 3"):
        run("fails", ["sh", "-c", "exit 3"])


def _prom_text(tmp_path: Path) -> Path:
    text = tmp_path / "scrape.prom"
    text.write_text("# capture ts=2026-06-18T21:00:00Z host=gpu-node-00 port=30002\n"
                    "# HELP sglang:num_running_reqs running\n# TYPE sglang:num_running_reqs gauge\n"
                    'sglang:num_running_reqs{model_name="m"} 3.0\nsglang:num_queue_reqs{model_name="m"} 1.0\n')
    return text


@pytest.mark.parametrize("reader", ["OURS", "CLIENT"])
def test_a_prom_row_that_read_another_count_of_samples_fails(tmp_path: Path, reader: str) -> None:
    """Each reader's sample count is checked against the text's sample lines, counted apart."""
    import bench.prom_parse as bench

    text = _prom_text(tmp_path)
    assert bench.count_samples(text) == 2
    ok = subprocess.run([sys.executable, "-c", getattr(bench, reader), str(text), "2"], capture_output=True,
                        text=True, cwd=ROOT)
    assert ok.returncode == 0, ok.stderr
    wrong = subprocess.run([sys.executable, "-c", getattr(bench, reader), str(text), "3"], capture_output=True,
                           text=True, cwd=ROOT)
    assert wrong.returncode != 0 and "read 2 samples of 3" in wrong.stderr


def test_cli_startup_checks_each_commands_exit_status_and_words() -> None:
    from bench.cli_startup import timed

    assert timed([sys.executable, "-c", "pass"], 0, rounds=1) > 0
    with pytest.raises(RuntimeError, match=r"exit status 0 \(expected 2\)"):
        timed([sys.executable, "-c", "pass"], 2, rounds=1)
    with pytest.raises(RuntimeError, match="exit status 1 \\(expected 0\\)"):
        timed([sys.executable, "-c", "raise SystemExit(1)"], 0, rounds=1)
    with pytest.raises(RuntimeError, match="did not print 'usage: forensics'"):
        timed([sys.executable, "-c", "print('usage: something else')"], 0, "usage: forensics", rounds=1)


def test_cli_exit_checks_each_runs_status_and_verdict() -> None:
    from bench.cli_exit import tail_timed

    said = "print('decode froze at 21:34:47 ... TP_DESYNC')"
    whole, tail = tail_timed([sys.executable, "-c", said])
    assert whole >= tail >= 0
    with pytest.raises(RuntimeError, match="exit status 3"):
        tail_timed([sys.executable, "-c", said + "; raise SystemExit(3)"])
    with pytest.raises(RuntimeError, match="not the work timed"):
        tail_timed([sys.executable, "-c", "print('decode froze at 21:34:47 (NO_VERDICT)')"])


LAST = {"sglang-dsv4-decode.service": "2026-06-18 21:44:59.594", "sglang-dsv4-prefill.service": "2026-06-18 21:44:59.508"}


def test_lnavs_last_progress_answer_is_checked_against_forensics() -> None:
    from bench.analyze_reference import check_last_progress

    lnav = [{"_SYSTEMD_UNIT": unit, "max(log_time)": at} for unit, at in LAST.items()]
    assert check_last_progress(lnav, LAST) == LAST
    late = [dict(row) for row in lnav]
    late[0]["max(log_time)"] = "2026-06-18 21:34:47.000"
    with pytest.raises(RuntimeError, match="differs from forensics'"):
        check_last_progress(late, LAST)
    with pytest.raises(RuntimeError, match="differs from forensics'"):
        check_last_progress(lnav[:1], LAST)
    with pytest.raises(RuntimeError, match="differs from forensics'"):  # both agree, but not on the two units
        check_last_progress(lnav[:1], dict(list(LAST.items())[:1]))


def test_lnavs_detector_answers_are_checked_against_the_incident() -> None:
    from bench.analyze_reference import check_detector_answers

    gaps = [{"unit": "sglang-dsv4-decode.service", "last_progress": "2026-06-18 21:34:47.1", "health_200": "9"},
            {"unit": "sglang-dsv4-prefill.service", "last_progress": "2026-06-18 21:39:07.2", "health_200": "3"}]
    lifecycle = [{"who": "sudo", "log_time": "2026-06-18 21:40:45.0", "log_body": "systemctl restart sglang-dsv4"},
                 {"who": "sglang-dsv4-decode.service", "log_time": "2026-06-18 21:42:00.5", "log_body": "healthy"}]
    kinds = [{"kind": k} for k in ("request_aborted", "kv_transfer_failure", "markup_leak")]
    check_detector_answers(gaps, lifecycle, kinds)
    with pytest.raises(RuntimeError, match="differ from the reference incident"):
        check_detector_answers(gaps[:1], lifecycle, kinds)
    with pytest.raises(RuntimeError, match="differ from the reference incident"):
        check_detector_answers(gaps, lifecycle, kinds[:2])


def test_watch_capture_fails_when_its_trigger_never_appeared() -> None:
    from bench.watch_capture import _Log, seconds_after_stall

    log = _Log()
    log.write("forensics watch: polling decode\n")
    with pytest.raises(RuntimeError, match="never logged 'made no progress'"):
        seconds_after_stall(log, [100.0], 130.0)
    log.noticed = 111.0
    assert seconds_after_stall(log, [100.0], 113.5) == (11.0, 13.5)
    with pytest.raises(RuntimeError, match="never stalled"):
        seconds_after_stall(log, [], 113.5)


def test_journal_peers_counts_are_checked(tmp_path: Path) -> None:
    from bench.journal_ingest import check_count

    check_count("lnav", 1500, 1500)
    with pytest.raises(RuntimeError, match="counted 1,499 entries of 1,500"):
        check_count("lnav", 1499, 1500)


@pytest.mark.skipif(not shutil.which("lnav"), reason="lnav needed")
def test_lnavs_count_of_the_json_is_checked(tmp_path: Path) -> None:
    from bench.journal_ingest import lnav_count

    lines = [('{"MESSAGE":"line %d","__REALTIME_TIMESTAMP":"17818176%02d000000","_SYSTEMD_UNIT":"x.service",'
              '"PRIORITY":"6","__CURSOR":"c%d","__MONOTONIC_TIMESTAMP":"%d","_BOOT_ID":"b"}') % (n, n, n, n)
             for n in range(3)]
    (tmp_path / "three.json").write_text("\n".join(lines) + "\n")
    assert lnav_count(str(tmp_path / "three.json"), 3).seconds > 0
    with pytest.raises(RuntimeError, match="lnav counted 3 entries of 4"):
        lnav_count(str(tmp_path / "three.json"), 4)


def test_fleet_scale_measures_the_growth_from_a_tenth_in_one_run() -> None:
    """The larger reference and a tenth of it analysed in the same run, the ratio printed from both."""
    pytest.importorskip("distributed")
    done = subprocess.run([sys.executable, "-m", "bench", "fleet_scale"], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "BENCH_FLEET_BIG_SCALE": "10", "BENCH_FLEET_HOSTS": "2",
                               "BENCH_FLEET_SCALES": "1"}, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| scale 1 (a tenth): in process |" in done.stdout
    assert "the time for 9.4× the entries (target <= 10×:" in done.stdout


def test_an_ab_run_that_imports_another_tree_than_the_revisions_fails(tmp_path: Path) -> None:
    """bench.ab times a revision's own package: a run importing another one (here the working tree's,
    when the revision's folder is elsewhere) stops instead of timing the wrong code."""
    from bench.ab import OWN_PACKAGE

    ok = subprocess.run([sys.executable, "-c", OWN_PACKAGE, "bundle", "case", str(ROOT)], capture_output=True,
                        text=True, cwd=ROOT)
    assert ok.returncode == 0, ok.stderr
    wrong = subprocess.run([sys.executable, "-c", OWN_PACKAGE, "bundle", "case", str(tmp_path)], capture_output=True,
                           text=True, cwd=ROOT)
    assert wrong.returncode != 0 and "not the revision's package" in wrong.stderr
