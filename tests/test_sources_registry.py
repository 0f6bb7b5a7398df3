"""The format registry: every reader module of forensics/sources' family folders is listed in the
stated sniffing order and registers once, by its NAME."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from forensics import sources
from forensics.errors import ForensicsError, WrongFormat


def test_every_module_in_the_folder_is_registered() -> None:
    registered_modules = {s.module for s in sources.registered().values()}
    for name in sources.source_modules():
        module = importlib.import_module(f"forensics.sources.{name}")
        assert f"forensics.sources.{name}" in registered_modules, f"{name} did not call register()"
        assert sources.get(module.NAME).module == module.__name__


def test_the_sniffing_order_is_stated_and_lists_every_reader_with_the_catch_all_last() -> None:
    assert sorted(sources.READERS) == sources.source_modules()
    assert sources.READERS[-1] == "logs.server_log"
    assert [s.module for s in sources.registered().values()] == [f"forensics.sources.{m}" for m in sources.READERS]


def test_a_second_registration_of_a_name_is_an_error() -> None:
    existing = next(iter(sources.registered().values()))
    with pytest.raises(ForensicsError, match="registered twice"):
        sources.register(existing.name, existing.sniff, existing.parse, module="elsewhere")


def test_unknown_and_empty_files_are_named(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("copied the logs at 21:45\n")
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    with pytest.raises(WrongFormat, match=r"notes\.txt: not a recognised input \(tried flight_recorder, flight_recorder_text, journal_export"):
        sources.detect(notes)
    with pytest.raises(WrongFormat, match=r"empty\.log: empty file"):
        sources.detect(empty)
    with pytest.raises(ForensicsError, match="no source named 'nope'"):
        sources.get("nope")
