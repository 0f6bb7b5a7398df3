"""incident.toml is checked against its schema: every wrong type and unknown key at once, with its path."""

from __future__ import annotations

from pathlib import Path

import pytest

from forensics.case.incident import ManifestError, load_incident

BAD = """
title = 5
hosts = 5
window = ["2026-06-18T21:20:00Z", "nope"]
colour = "red"
[components.decode]
units = "abc"
ports = ["a"]
stacks_group = 3
[[annotations]]
at = "x"
[inputs]
journal = "j/*"
"""


def test_every_problem_is_reported_at_once_with_its_path(tmp_path: Path) -> None:
    (tmp_path / "incident.toml").write_text(BAD)
    with pytest.raises(ManifestError) as caught:
        load_incident(tmp_path)
    message = str(caught.value)
    assert "10 problems" in message
    for expected in ("title: expected a string, found an integer ('5')",
                     "hosts: expected a table of tables, found an integer ('5')",
                     "window[1]: expected a time, found a string ('nope')",
                     "colour: unknown key",
                     "components.decode.units: expected a list of strings, found a string ('abc')",
                     "components.decode.ports: expected a list of integers, found a string ('a') in it",
                     "components.decode.stacks_group: expected a string, found an integer ('3')",
                     "annotations[0].at: expected a time", "annotations[0].text: missing",
                     "inputs.journal: expected a list of strings"):
        assert expected in message, expected


@pytest.mark.parametrize(("text", "expected"), [
    ('[hosts.a]\nclock_offset_s = "7"', "hosts.a.clock_offset_s: expected a number"),
    ('[hosts.a]\ntime_zone = 3', "hosts.a.time_zone: expected a string"),
    ("window = 3", "window: expected [start, end]"),
    ("annotations = 3", "annotations: expected an array of tables"),
    ('[components.x]\nports = [true]', "components.x.ports: expected a list of integers, found a boolean"),
    ("inputs = 1", "inputs: expected a table of glob lists"),
])
def test_each_wrong_type_names_its_key(tmp_path: Path, text: str, expected: str) -> None:
    (tmp_path / "incident.toml").write_text(text)
    with pytest.raises(ManifestError, match="incident.toml: 1 problem: "):
        load_incident(tmp_path)
    with pytest.raises(ManifestError) as caught:
        load_incident(tmp_path)
    assert expected in str(caught.value)


def test_the_reference_manifest_is_valid() -> None:
    reference = Path(__file__).resolve().parents[2] / "data" / "incidents" / "dsv4-pd-wedge-2026-06-18"
    assert load_incident(reference).title.startswith("DeepSeek-V4-Flash PD wedge")
