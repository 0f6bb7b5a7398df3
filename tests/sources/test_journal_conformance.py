"""The three journald loaders agree with systemd's own tools, field for field.

Entries with binary, repeated and non-UTF-8 fields are written to a real .journal by
systemd-journal-remote, exported back with journalctl (-o export, -o json, -o json-seq), and read by
each loader; the events frames must be identical apart from where each row was read from.
"""

from __future__ import annotations

import gzip
import io
import json
import lzma
from pathlib import Path

import polars as pl
import pytest
import zstandard
from polars.testing import assert_frame_equal

from forensics import sources
from forensics.errors import ParseError
from forensics.sources.journal.cursor import whole_cursor
from forensics.lab.synth import entries, write_export_entry
from tests.conftest import export_entry, journalctl, to_journal

PROVENANCE = ["format", "source_file", "source_offset", "source_line"]
T0 = 1781818487000000
BOOT = "0123456789abcdef0123456789abcdef"
DSML = '<｜DSML｜invoke name="get_weather">'


def _special_entries() -> bytes:
    base = [("__REALTIME_TIMESTAMP", None), ("__MONOTONIC_TIMESTAMP", None), ("_BOOT_ID", BOOT),
            ("_HOSTNAME", "gpu-node-00")]

    def entry(i: int, *more: tuple[str, bytes | str]) -> bytes:
        fields = [(k, str(T0 + i * 1000) if k == "__REALTIME_TIMESTAMP" else
                   str(5_000_000 + i) if k == "__MONOTONIC_TIMESTAMP" else v) for k, v in base]
        return export_entry(*fields, *more)

    return b"".join([
        entry(0, ("MESSAGE", "key = value = more"), ("FOO", "1"), ("FOO", "2"), ("PRIORITY", "6"),
              ("_SYSTEMD_UNIT", "sglang-dsv4-decode.service"), ("_PID", "4101")),
        entry(1, ("MESSAGE", b"line one\nline two\x00\xff end"), ("BAR", "x")),
        entry(2, ("MESSAGE", f"assistant text: {DSML}\twith a tab"), ("SYSLOG_IDENTIFIER", "python3")),
        entry(3, ("MESSAGE", "binary custom field"), ("BLOB", b"\xfe\xfd\x00"), ("BLOB", b"\x01\x02"),
              ("TAGS", "a"), ("TAGS", "b"), ("TAGS", "c")),
        entry(4, ("MESSAGE", "Stopping sglang-dsv4-decode.service..."), ("UNIT", "sglang-dsv4-decode.service"),
              ("MESSAGE_ID", "de5b426a63be47a7b6ac3eaac82e2f6f"), ("_PID", "1"),
              ("_SYSTEMD_UNIT", "init.scope"), ("_SYSTEMD_INVOCATION_ID", "aa" * 16), ("PRIORITY", "6")),
        entry(5, ("MESSAGE", "")),
    ])


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("conformance")
    generated = io.BytesIO()
    for fields in entries(300, hosts=2, seed=7):
        write_export_entry(generated, fields)
    return to_journal(_special_entries() + generated.getvalue(), folder)


def _events(path: Path) -> pl.DataFrame:
    source = sources.detect(path)
    result = source.parse(path)
    result.check_accounting(path)
    assert result.quarantine.height == 0, result.quarantine.to_dicts()
    return result.rows.drop(PROVENANCE)


@pytest.fixture(scope="module")
def exported(journal: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("exported")
    paths = {}
    for output in ("export", "json", "json-seq"):
        paths[output] = folder / f"journal.{output}"
        paths[output].write_bytes(journalctl(journal, output))
    return paths


def test_export_json_and_native_loaders_give_identical_frames(journal: Path, exported: dict[str, Path]) -> None:
    native = _events(journal)
    assert native.height == 306
    assert_frame_equal(_events(exported["export"]), native)
    assert_frame_equal(_events(exported["json"]), native)
    assert_frame_equal(_events(exported["json-seq"]), native)


def test_journalctl_and_python_systemd_read_a_journal_alike(journal: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The two ways a .journal is read — systemd's journalctl streaming its export into the C
    scanner (the default), python-systemd stepping entry by entry (no journalctl) — give the same
    frame, and a file systemd cannot open is refused in the same words by both."""
    from forensics.sources.journal import journal_native

    through_journalctl = _events(journal)
    monkeypatch.setenv(journal_native.JOURNALCTL_ENV, "")
    assert journal_native.journalctl() is None
    assert_frame_equal(_events(journal), through_journalctl)
    broken = journal.with_name("broken.journal")
    broken.write_bytes(b"LPKSHHRH" + b"\0" * 100)
    refusals = []
    for program in ("", "journalctl"):
        monkeypatch.setenv(journal_native.JOURNALCTL_ENV, program)
        with pytest.raises(ParseError, match="systemd cannot open it as a journal") as caught:
            journal_native.parse(broken)
        refusals.append(str(caught.value).split(":")[0])
    assert refusals == [str(broken)] * 2


def test_a_journal_directory_reads_like_its_file(journal: Path, tmp_path: Path) -> None:
    # journald's own layout: a machine-id folder holding the active file and archived ones.
    folder = tmp_path / "var-log-journal" / ("5b" * 16)
    folder.mkdir(parents=True)
    (folder / f"system@{'c3' * 16}-0000000000000001-0006548df1f8cbc0.journal").write_bytes(journal.read_bytes())
    assert sources.detect(tmp_path / "var-log-journal").name == "journal_native"
    assert_frame_equal(_events(tmp_path / "var-log-journal"), _events(journal))


def test_field_values_match_what_journalctl_shows(journal: Path, exported: dict[str, Path]) -> None:
    events = _events(exported["export"]).head(6)
    rows = events.with_columns(whole_cursor()).to_dicts()
    shown = [json.loads(line) for line in journalctl(journal, "json").splitlines()[:6]]
    # journald's cursors are held as their values (none kept as text) and written back as journalctl shows them
    assert events.get_column("__CURSOR").null_count() == 6 and events.get_column("cursor_seqnum").null_count() == 0
    assert [r["__CURSOR"] for r in rows] == [s["__CURSOR"] for s in shown]
    first, binary, dsml, custom, systemd, empty = rows
    assert first["message"] == "key = value = more"
    assert first["FOO"] == "1" and first["raw_fields"] == [{"name": "FOO", "value": b"2"}]
    assert first["unit"] == "sglang-dsv4-decode.service" and first["pid"] == 4101 and first["priority"] == 6
    assert str(first["ts"]) == "2026-06-18 21:34:47+00:00"
    # Not UTF-8: decoded with U+FFFD in its column, exact bytes kept in raw_fields.
    assert binary["message"] == "line one\nline two\x00\ufffd end"
    assert binary["raw_fields"] == [{"name": "MESSAGE", "value": b"line one\nline two\x00\xff end"}]
    assert bytes(shown[1]["MESSAGE"]) == b"line one\nline two\x00\xff end"
    assert dsml["message"] == f"assistant text: {DSML}\twith a tab"
    assert custom["BLOB"] == "\ufffd\ufffd\x00"
    assert {(f["name"], f["value"]) for f in custom["raw_fields"]} == {
        ("BLOB", b"\xfe\xfd\x00"), ("BLOB", b"\x01\x02"), ("TAGS", b"b"), ("TAGS", b"c")}
    assert custom["TAGS"] == "a"
    # systemd's own message about a unit is filed under that unit, not under init.scope.
    assert systemd["unit"] == "sglang-dsv4-decode.service" and systemd["_SYSTEMD_UNIT"] == "init.scope"
    assert systemd["message_id"] == "de5b426a63be47a7b6ac3eaac82e2f6f" and systemd["invocation_id"] == "aa" * 16
    assert empty["message"] == ""


@pytest.mark.parametrize("compress", [gzip.compress, lzma.compress, zstandard.ZstdCompressor().compress],
                         ids=["gzip", "xz", "zstd"])
def test_compressed_exports_read_the_same(exported: dict[str, Path], tmp_path: Path, compress) -> None:
    for output in ("export", "json"):
        packed = tmp_path / f"journal.{output}.packed"
        packed.write_bytes(compress(exported[output].read_bytes()))
        assert_frame_equal(_events(packed), _events(exported[output]))


def test_concatenated_exports_of_two_hosts(exported: dict[str, Path], tmp_path: Path) -> None:
    one = exported["export"].read_bytes()
    other = export_entry(("__REALTIME_TIMESTAMP", str(T0)), ("_HOSTNAME", "gpu-node-07"), ("MESSAGE", "other host"))
    both = tmp_path / "both.export"
    both.write_bytes(one + other)
    frame = _events(both)
    assert frame.height == 307
    assert frame.get_column("host").value_counts().sort("host").rows() == [
        ("gpu-node-00", 6 + 150), ("gpu-node-01", 150), ("gpu-node-07", 1)]


def test_json_null_for_an_oversized_field_is_kept_as_such(tmp_path: Path) -> None:
    big = "x" * 5000
    journal = to_journal(export_entry(("__REALTIME_TIMESTAMP", str(T0)), ("MESSAGE", "m"), ("HUGE", big)), tmp_path)
    as_json = tmp_path / "j.json"
    as_json.write_bytes(journalctl(journal, "json"))
    assert json.loads(as_json.read_text())["HUGE"] is None  # journalctl leaves it out...
    row = _events(as_json).row(0, named=True)
    assert row["HUGE"] is None
    assert row["raw_fields"] == [{"name": "HUGE", "value": None}]  # ...and we say so instead of forgetting it
    assert _events(journal).row(0, named=True)["HUGE"] == big


def test_small_batches_and_chunks_change_nothing(journal: Path, exported: dict[str, Path],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    expected = {name: _events(path) for name, path in [("native", journal), *exported.items()]}
    import forensics.sources.journal.fields
    from forensics.sources.journal import journal_export
    monkeypatch.setattr(forensics.sources.journal.fields, "BATCH_RECORDS", 7)
    monkeypatch.setattr(journal_export, "CHUNK_BYTES", 1000)
    for name, path in [("native", journal), *exported.items()]:
        assert_frame_equal(_events(path), expected[name])
