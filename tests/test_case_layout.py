"""A case on disk: Hive partitions by host that other engines read as they are, host names from
the evidence kept out of paths, a cap on how many hosts one input may make, repeated records
dropped exactly within a host's folder, and a host folder's finishing step safe to run again
after being killed at any point."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pandas as pd
import polars as pl
import pytest

from forensics.case import build as case_module
from forensics.case import ingest, load_case
from forensics.sources.common.schema import EVENTS_SCHEMA
from forensics.case.store import finish_partition, partition_name
from tests.conftest import REPO, export_entry

REFERENCE = REPO / "data" / "incidents" / "dsv4-pd-wedge-2026-06-18"


def _entry(host: str, i: int, message: str, *extra: tuple[str, str], boot: str = "b" * 32) -> bytes:
    return export_entry(("__CURSOR", f"s=x;i={i:x};h={host}"), ("__REALTIME_TIMESTAMP", str(1781818000000000 + i)),
                        ("__MONOTONIC_TIMESTAMP", str(1000 + i)), ("_BOOT_ID", boot), ("_HOSTNAME", host),
                        ("_SYSTEMD_UNIT", "app.service"), ("MESSAGE", message), *extra)


@pytest.fixture(scope="module")
def reference_case(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("layout") / "case"
    ingest(REFERENCE, folder)
    return folder


def test_every_frame_is_a_hive_dataset_by_host_listed_in_the_manifest(reference_case: Path) -> None:
    manifest = json.loads((reference_case / "manifest.json").read_text())
    layout = manifest["layout"]
    assert layout["partitioned_by"] == "host"
    for name in ("events", "samples", "stacks"):
        assert layout["partitions"][name] == ["gpu-node-00"]
        folders = sorted(p.name for p in (reference_case / name).iterdir())
        assert folders == ["host=gpu-node-00"], name
        files = list((reference_case / name / "host=gpu-node-00").glob("*.parquet"))
        assert len(files) == 1 and "host" not in pl.read_parquet_schema(files[0]), "host lives in the path only"


@pytest.mark.parametrize("name", ["events", "samples", "stacks", "quarantine"])
def test_polars_pandas_and_duckdb_read_each_frame_as_it_lies(reference_case: Path, name: str) -> None:
    """The documented one-liners of docs/scale.md, each giving the rows forensics gives."""
    case = load_case(reference_case)
    ours = getattr(case, name).collect()
    folder = reference_case / name
    by_polars = pl.read_parquet(folder, hive_partitioning=True)
    by_pandas = pd.read_parquet(folder)
    by_duckdb = duckdb.sql(f"SELECT * FROM read_parquet('{folder}/**/*.parquet', hive_partitioning = true, "
                           "union_by_name = true)").pl()
    for other in (by_polars, by_pandas, by_duckdb):
        assert len(other) == ours.height
    if name != "quarantine":
        assert set(by_pandas["host"].astype(str)) == set(ours.get_column("host").cast(pl.String)) == {"gpu-node-00"}
        assert set(by_duckdb.get_column("host")) == {"gpu-node-00"}
        assert sorted(by_duckdb.get_column("ts").dt.epoch("us")) == sorted(ours.get_column("ts").dt.epoch("us"))


# docs/scale.md: journald's cursors written back in SQL, as `load_case` gives them
CURSOR_SQL = """SELECT coalesce(__CURSOR, printf('s=%s;i=%x;b=%s;m=%x;t=%x;x=%x', cursor_seqnum_id, cursor_seqnum,
                _BOOT_ID, __MONOTONIC_TIMESTAMP, __REALTIME_TIMESTAMP, cursor_xor)) AS cursor
FROM read_parquet('{folder}/*/*.parquet', hive_partitioning = true)"""


def test_duckdb_writes_back_every_cursor_as_forensics_gives_it(reference_case: Path) -> None:
    ours = load_case(reference_case).events.select("__CURSOR").collect().get_column("__CURSOR")
    theirs = duckdb.sql(CURSOR_SQL.format(folder=reference_case / "events")).pl().get_column("cursor")
    assert ours.null_count() == 0 and sorted(theirs.to_list()) == sorted(ours.to_list())


def test_host_names_from_the_evidence_never_become_paths(tmp_path: Path) -> None:
    hosts = ["../../escape", "a/b", "%41", "nul\\l", ".."]
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "j.export").write_bytes(b"".join(_entry(h, i, f"line {i}") for i, h in enumerate(hosts)))
    ingest(bundle, tmp_path / "case")
    made = sorted(p.relative_to(tmp_path / "case") for p in (tmp_path / "case").rglob("*"))
    assert all(".." not in p.parts for p in made)
    assert not (tmp_path / "escape").exists()
    events = load_case(tmp_path / "case").events.collect()
    assert sorted(events.get_column("host").to_list()) == sorted(hosts)  # read back exactly
    assert partition_name("a/b") == "host=a%2Fb"


def test_an_input_naming_too_many_hosts_has_the_rest_quarantined(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(case_module, "MAX_HOSTS", 3)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "j.export").write_bytes(b"".join(_entry(f"forged-{i % 5}", i, f"line {i}") for i in range(20)))
    manifest = ingest(bundle, tmp_path / "case")
    entry = manifest["inputs"][0]
    assert (entry["records"], entry["parsed"], entry["quarantined"]) == (20, 12, 8)
    case = load_case(tmp_path / "case")
    assert case.events.select(pl.col("host").n_unique()).collect().item() == 3
    reasons = case.quarantine.collect()
    assert reasons.height == 8 and reasons.get_column("reason").str.contains("past the 3 hosts").all()
    assert set(reasons.get_column("line").to_list()) != {None}


def test_repeats_across_inputs_are_dropped_within_the_host_and_columns_meet(tmp_path: Path) -> None:
    """Two overlapping exports of one host and a third host with a field of its own: the overlap
    is kept once (counted against the later input), and every host's folder has every column."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "a.export").write_bytes(b"".join(_entry("one", i, f"line {i}") for i in range(10)))
    (bundle / "b.export").write_bytes(b"".join(_entry("one", i, f"line {i}") for i in range(5, 15)))
    (bundle / "c.export").write_bytes(b"".join(_entry("two", i, f"other {i}", ("ONLY_HERE", "x")) for i in range(4)))
    manifest = ingest(bundle, tmp_path / "case")
    dup = {e["path"]: e["duplicates"] for e in manifest["inputs"]}
    assert dup == {"a.export": 0, "b.export": 5, "c.export": 0}
    assert manifest["totals"]["events"] == 15 + 4
    events = load_case(tmp_path / "case").events.collect()
    assert events.height == 19
    assert events.filter(pl.col("host") == "one").get_column("message").n_unique() == 15
    for folder in (tmp_path / "case" / "events").iterdir():
        (part,) = folder.glob("*.parquet")
        assert "ONLY_HERE" in pl.read_parquet_schema(part), folder.name


def test_finishing_a_host_folder_again_after_a_kill_gives_the_same_folder(tmp_path: Path) -> None:
    """The states a killed worker can leave — the whole file written but not its counts, or the
    parts already replaced — are finished by running the step again."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "a.export").write_bytes(b"".join(_entry("h", i, f"line {i}") for i in range(9)))
    ingest(bundle, tmp_path / "case")
    (whole,) = (tmp_path / "case" / "events" / "host=h").glob("*.parquet")
    rows = pl.read_parquet(whole)
    extras = [c for c in rows.columns if c not in EVENTS_SCHEMA]

    def parts(folder: Path) -> None:
        folder.mkdir(parents=True)
        for i in range(3):
            rows.slice(3 * i, 3).write_parquet(folder / f"part-00000{i}-000000.parquet")

    def finished(folder: Path) -> list[str]:
        return sorted(p.name for p in folder.iterdir())

    plain = tmp_path / "plain" / "host=h"
    parts(plain)
    finish_partition(plain, "events", extras)
    expected = pl.read_parquet(plain / "part-0.parquet")
    assert expected.equals(rows)
    assert finished(plain) == ["part-0.parquet"]

    written_not_counted = tmp_path / "killed-1" / "host=h"
    parts(written_not_counted)
    (written_not_counted / "part-0.parquet.whole").write_bytes(b"half a file")
    assert finish_partition(written_not_counted, "events", extras) == {}
    assert finished(written_not_counted) == ["part-0.parquet"]
    assert pl.read_parquet(written_not_counted / "part-0.parquet").equals(expected)

    swapped_not_reported = tmp_path / "killed-2" / "host=h"
    swapped_not_reported.mkdir(parents=True)
    (plain / "part-0.parquet").rename(swapped_not_reported / "part-0.parquet")
    (swapped_not_reported / ".dropped.json").write_text('{"a.export": 2}')
    assert finish_partition(swapped_not_reported, "events", extras) == {"a.export": 2}
    assert finished(swapped_not_reported) == ["part-0.parquet"]


def test_a_host_name_too_long_for_a_folder_is_quarantined_not_a_crash(tmp_path: Path) -> None:
    """A forged `_HOSTNAME` or capture-header `host=` longer than a folder name can be: those
    records are quarantined with the reason, the rest of the input is read."""
    long_name = "h" * 300
    bundle = tmp_path / "bundle"
    (bundle / "stacks").mkdir(parents=True)
    (bundle / "j.export").write_bytes(_entry(long_name, 1, "forged") + _entry("fine", 2, "kept"))
    dumps = (REFERENCE / "stacks" / "round-1.txt").read_text()
    first, second = dumps.split("# capture")[1:3]
    (bundle / "stacks" / "two.txt").write_text("# capture" + first.replace("host=gpu-node-00", f"host={long_name}")
                                               + "# capture" + second)
    manifest = ingest(bundle, tmp_path / "case")
    by_path = {e["path"]: e for e in manifest["inputs"]}
    assert (by_path["j.export"]["parsed"], by_path["j.export"]["quarantined"]) == (1, 1)
    stacks = by_path["stacks/two.txt"]
    assert (stacks["records"], stacks["parsed"], stacks["quarantined"]) == (2, 1, 1)
    case = load_case(tmp_path / "case")
    reasons = case.quarantine.collect().get_column("reason").to_list()
    assert reasons == ["host of 300 characters: too long for a folder name (forged or damaged); not kept"] * 2
    assert case.events.collect().get_column("host").to_list() == ["fine"]
    assert case.stacks.select(pl.col("dump").n_unique()).collect().item() == 1


@pytest.mark.parametrize("limit", [0, 2_000, None], ids=["written-as-parts", "held-then-spilled", "held"])
def test_rows_held_in_memory_spilled_or_written_as_parts_make_the_same_case(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: int | None) -> None:
    """An ingest in this process holds rows in memory up to a limit, and an input that finds no
    room writes what it held as parts: whichever way, the case is the one the part-writing ingest
    (Dask's) makes — repeats dropped, every column in every host folder, the input's order kept."""
    monkeypatch.setattr(case_module, "PART_ROWS", 3)  # several parts per input
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "a.export").write_bytes(b"".join(_entry("one", i, f"line {i}") for i in range(10)))
    (bundle / "b.export").write_bytes(b"".join(_entry("one", i, f"line {i}") for i in range(5, 15)))
    (bundle / "c.export").write_bytes(b"".join(_entry("two" if i % 2 else "one", 100 + i, f"other {i}",
                                                      ("ONLY_HERE", "x")) for i in range(8)))
    held = case_module.Held(limit, keep_events=10**9)
    manifest = ingest(bundle, tmp_path / "case", run=case_module.cluster.Local(), held=held)
    assert {e["path"]: e["duplicates"] for e in manifest["inputs"]} == {"a.export": 0, "b.export": 5, "c.export": 0}
    assert manifest["totals"]["events"] == 15 + 8
    events = load_case(tmp_path / "case").events.collect()
    expected = [f"line {i}" for i in range(15)] + [f"other {i}" for i in range(0, 8, 2)]
    assert events.filter(pl.col("host") == "one").get_column("message").to_list() == expected
    assert events.filter(pl.col("host") == "two").get_column("message").to_list() == [f"other {i}" for i in (1, 3, 5, 7)]
    for folder in (tmp_path / "case" / "events").iterdir():
        (part,) = folder.glob("*.parquet")
        assert "ONLY_HERE" in pl.read_parquet_schema(part), folder.name
    if limit == 0:
        assert not held.events and held.spilled == {0, 1, 2}
    elif limit is None:  # every host's rows as written, for the timeline
        assert not held.spilled
        for host, rows in held.events.items():
            on_disk = pl.read_parquet(tmp_path / "case" / "events" / partition_name(host) / "part-0.parquet")
            assert rows.equals(on_disk.select(rows.columns)), host
    else:
        assert held.spilled and held.spilled != {0, 1, 2}  # some input held rows, then wrote them as parts


def test_an_input_s_rows_are_written_as_a_part_once_they_hold_part_bytes(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows are written as a part once PART_ROWS of them or PART_BYTES of theirs are waiting: an export
    of big entries must not be held until its 250,000th row. The case is the same either way."""
    from forensics.sources.journal import journal_export

    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "a.export").write_bytes(b"".join(_entry("one", i, f"line {i} " + "x" * 200) for i in range(10)))
    whole = ingest(bundle, tmp_path / "whole", run=case_module.cluster.Local(), held=case_module.Held(0))
    monkeypatch.setattr(journal_export, "CHUNK_BYTES", 512)  # the export read in several pieces
    monkeypatch.setattr(case_module, "PART_BYTES", 1)
    written: list[int] = []
    write_part = case_module.write_part
    monkeypatch.setattr(case_module, "write_part",
                        lambda folder, name, rows, tag: written.append(rows.height) or write_part(folder, name, rows, tag))
    cut = ingest(bundle, tmp_path / "cut", run=case_module.cluster.Local(), held=case_module.Held(0))
    assert len(written) > 1 and sum(written) == 10
    assert cut["totals"] == whole["totals"]
    columns = ["message", "ts", "source_line"]
    assert load_case(tmp_path / "cut").events.select(columns).collect().equals(
        load_case(tmp_path / "whole").events.select(columns).collect())


@pytest.mark.parametrize("limit", [0, None], ids=["parts-merged", "held-written-once"])
def test_row_groups_of_big_rows_hold_about_group_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       limit: int | None) -> None:
    """A writer holds a row group whole before writing it: groups of big rows are cut by their size
    (GROUP_BYTES), not only by WRITE_OPTIONS' 32 k rows — merged from parts or written from rows held."""
    import pyarrow.parquet as pq

    from forensics.case import store
    from forensics.sources.journal import journal_export

    monkeypatch.setattr(store, "GROUP_BYTES", 8 << 10)
    monkeypatch.setattr(journal_export, "CHUNK_BYTES", 4096)  # the export read in several pieces,
    monkeypatch.setattr(case_module, "PART_ROWS", 7)  # written as parts to merge when nothing is held
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "a.export").write_bytes(b"".join(_entry("one", i, f"{i} " + "x" * 1000) for i in range(40)))
    ingest(bundle, tmp_path / "case", run=case_module.cluster.Local(), held=case_module.Held(limit))
    (part,) = (tmp_path / "case" / "events").glob("*/*.parquet")
    assert part.name == "part-0.parquet"  # merged, or written once
    meta = pq.read_metadata(part)
    groups = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    assert sum(groups) == 40 and 1 < len(groups) and max(groups) <= (8 << 10) // 1000
    assert load_case(tmp_path / "case").events.select("message").collect().to_series().to_list() == \
        [f"{i} " + "x" * 1000 for i in range(40)]


def test_journal_rows_past_what_the_timeline_keeps_are_let_go_once_written(tmp_path: Path) -> None:
    """A case with more journal rows than the analysis keeps for its timeline (a lean one) keeps
    none: each host's rows go once its file is written."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "a.export").write_bytes(b"".join(_entry("one", i, f"line {i}") for i in range(10)))
    kept, let_go = case_module.Held(keep_events=10), case_module.Held(keep_events=9)
    ingest(bundle, tmp_path / "kept", held=kept)
    ingest(bundle, tmp_path / "let-go", held=let_go)
    assert kept.events["one"].height == 10 and not let_go.events


def test_a_bundle_too_big_to_hold_writes_parts_and_makes_the_same_case(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Past HOLD_INPUT_BYTES of inputs nothing is held (a fleet's rows would sit in memory through
    the rest of the ingest): every input writes parts, and the case is the same."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "a.export").write_bytes(b"".join(_entry("one", i, f"line {i}") for i in range(10)))
    small, big = case_module.Held(keep_events=10**9), case_module.Held(keep_events=10**9)
    ingest(bundle, tmp_path / "held", held=small)
    monkeypatch.setattr(case_module, "HOLD_INPUT_BYTES", 100)
    ingest(bundle, tmp_path / "parts", held=big)
    assert small.events and not small.spilled
    assert not big.events and big.spilled == {0}
    assert (load_case(tmp_path / "held").events.collect().drop("source_file")
            .equals(load_case(tmp_path / "parts").events.collect().drop("source_file")))
