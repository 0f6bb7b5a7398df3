"""The same case and the same analysis whether ingest runs in this process or as tasks on a real
Dask cluster (a `LocalCluster` of worker processes, not a mock); a worker killed mid-run gives a
retried task or a clear error, never a half-written case; workers that cannot see the bundle are
named before any work is sent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from distributed import Client, LocalCluster

from forensics.analyze import analyze
from forensics.case import FRAMES, ingest, load_case
from forensics.case.cluster import DASK_ENV, Dask
from forensics.errors import CaseError
from forensics.lab.reference import write_reference
from tests.conftest import REPO

REFERENCE = REPO / "data" / "incidents" / "dsv4-pd-wedge-2026-06-18"


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                      silence_logs=50) as running:
        yield running


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference incident on three hosts (the story on the first, traffic on the others)."""
    bundle = tmp_path_factory.mktemp("fleet") / "fleet"
    write_reference(bundle, hosts=3)
    return bundle


def _frames(case_dir: Path) -> dict[str, pl.DataFrame]:
    case = load_case(case_dir)
    return {name: getattr(case, name).collect() for name in FRAMES}


def _same_cases(one: Path, other: Path) -> None:
    mine, theirs = _frames(one), _frames(other)
    for name in FRAMES:
        assert mine[name].equals(theirs[name]), name
    first, second = (json.loads((c / "manifest.json").read_text()) for c in (one, other))
    assert first == second


@pytest.mark.parametrize("which", ["reference", "fleet"])
def test_dask_and_in_process_ingest_write_equal_cases(cluster: LocalCluster, fleet: Path, tmp_path: Path,
                                                      which: str) -> None:
    bundle = REFERENCE if which == "reference" else fleet
    ingest(bundle, tmp_path / "local")
    run = Dask(cluster.scheduler_address)
    try:
        ingest(bundle, tmp_path / "dask", run=run)
    finally:
        run.close()
    _same_cases(tmp_path / "local", tmp_path / "dask")
    hosts = json.loads((tmp_path / "dask" / "manifest.json").read_text())["layout"]["partitions"]["events"]
    assert len(hosts) == (1 if which == "reference" else 3)


def _findings(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if k != "bundle"}


@pytest.mark.parametrize("which", ["reference", "fleet"])
def test_analysis_through_dask_gives_the_same_findings(cluster: LocalCluster, fleet: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch, which: str) -> None:
    bundle = REFERENCE if which == "reference" else fleet
    local = analyze(bundle, tmp_path / "local")
    monkeypatch.setenv(DASK_ENV, cluster.scheduler_address)
    through_dask = analyze(bundle, tmp_path / "dask")
    assert _findings(through_dask.summary()) == _findings(local.summary())
    assert through_dask.summary()["key_times"]["started"].startswith("2026-06-18T21:34:47")
    # the timeline's host tasks ran on the workers, and what they found is the same
    with Client(cluster.scheduler_address) as client:
        prefixes = client.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.task_prefixes))
    assert any("hosts" in prefix for prefix in prefixes), prefixes
    for frame in ("events", "activity", "progress_streams", "progress_gaps", "progress_counts", "source_gaps"):
        mine, theirs = getattr(local.timeline, frame), getattr(through_dask.timeline, frame)
        assert theirs.sort(theirs.columns).equals(mine.sort(mine.columns)), frame


def test_the_command_line_takes_the_scheduler_address(cluster: LocalCluster, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "forensics.cli", "analyze", str(REFERENCE), "--json"]
    local = subprocess.run([*command, "--case", str(tmp_path / "a")], capture_output=True, text=True, check=True)
    remote = subprocess.run([*command, "--case", str(tmp_path / "b"), "--dask", cluster.scheduler_address],
                            capture_output=True, text=True, check=True)
    assert _findings(json.loads(remote.stdout)) == _findings(json.loads(local.stdout))


def test_workers_that_cannot_see_the_bundle_are_named_first(cluster: LocalCluster, tmp_path: Path) -> None:
    run = Dask(cluster.scheduler_address)
    try:
        with pytest.raises(CaseError, match=r"2 Dask worker\(s\) cannot see .*nowhere.*same path on every worker"):
            run.check_paths([tmp_path / "nowhere"])
    finally:
        run.close()


def test_no_scheduler_at_the_address_is_a_clear_error() -> None:
    with pytest.raises(CaseError, match="no Dask scheduler answers there"):
        Dask("tcp://127.0.0.1:9")


def _ingest_killing_a_worker(bundle: Path, case: Path, address: str, watcher: Client
                             ) -> tuple[str | None, dict[str, Any]]:
    """Ingest `bundle` through the cluster while SIGKILLing the first worker seen reading an input:
    which worker was killed (None if the ingest ended first), and how the ingest ended."""
    pids = watcher.run(os.getpid)
    outcome: dict[str, Any] = {}

    def run() -> None:
        runner = Dask(address)
        try:
            ingest(bundle, case, run=runner)
            outcome["done"] = True
        except CaseError as error:
            outcome["error"] = error
        finally:
            runner.close()

    worker = threading.Thread(target=run)
    worker.start()
    killed = None
    deadline = time.monotonic() + 60
    while killed is None and worker.is_alive() and time.monotonic() < deadline:
        for where, tasks in watcher.processing().items():
            if where in pids and any("forensics-inputs" in str(key) for key in tasks):
                os.kill(pids[where], signal.SIGKILL)
                killed = where
                break
        time.sleep(0.005)
    worker.join(timeout=120)
    assert not worker.is_alive()
    return killed, outcome


def test_a_worker_killed_mid_run_has_its_task_retried_and_the_case_whole(fleet: Path, tmp_path: Path) -> None:
    """A worker process is killed (SIGKILL) while it reads an input: its task runs again (on the other
    worker, or the restarted one) and the run succeeds, its case equal frame for frame to the
    in-process one (so every finding is the same), with no leftovers — the README's "retried
    elsewhere", shown."""
    ingest(fleet, tmp_path / "local")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                      silence_logs=50) as own, Client(own.scheduler_address) as watcher:
        for _ in range(3):  # a fast machine may finish before the watcher sees a task: try again
            killed, outcome = _ingest_killing_a_worker(fleet, tmp_path / "dask", own.scheduler_address, watcher)
            if killed is not None:
                break
            watcher.wait_for_workers(2, timeout=60)
    assert killed is not None, "no worker was seen reading an input"
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".dask.partial")]
    assert leftovers == []
    assert outcome.get("done"), outcome.get("error")
    _same_cases(tmp_path / "local", tmp_path / "dask")
