"""The stamp forms of profiles/stamps/forms.toml: every real sample read by the server log reader
gives the time its line wrote (the expected times are the samples' own text), a form marked
`sniff` makes a file a server log wherever it lies, and a form the reader cannot read is refused
with its name."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import pytest

from forensics.errors import ForensicsError
from forensics.sources import detect
from forensics.sources.logs import server_log, stamps

SAMPLES = [(form.name, sample) for form in stamps.forms() for sample in form.samples]


def test_every_form_has_a_real_sample_with_its_origin() -> None:
    for form in stamps.forms():
        assert form.samples, form.name
        for sample in form.samples:
            assert str(sample.get("origin", "")).strip(), (form.name, sample["line"])


@pytest.mark.parametrize(("form", "sample"), SAMPLES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(SAMPLES)])
def test_a_sample_is_read_at_the_time_it_wrote(tmp_path: Path, form: str, sample: dict) -> None:
    log = tmp_path / "logs" / "node-0" / "server.log"
    log.parent.mkdir(parents=True)
    log.write_text(f"{sample['line']}\n")
    if "year" in sample:  # a form without a year: the file's modification year is the one said
        stamp = datetime(int(sample["year"]), 6, 1).timestamp()
        os.utime(log, (stamp, stamp))
    result = server_log.parse(log)
    assert result.rows.height == 1 and result.quarantine.height == 0, form
    read = result.rows.get_column("ts")[0].replace(tzinfo=None)
    assert read == datetime.fromisoformat(str(sample["time"])), form


@pytest.mark.parametrize("form", [f for f in stamps.forms() if f.sniff], ids=lambda f: f.name)
def test_a_sniffed_form_makes_a_server_log_wherever_it_lies(tmp_path: Path, form: stamps.StampForm) -> None:
    pasted = tmp_path / "pasted.txt"  # not under logs/, not named *.log
    pasted.write_text(f"{form.samples[0]['line']}\n")
    assert detect(pasted).name == "server_log"


def test_a_form_with_a_group_the_reader_does_not_know_is_refused_by_name(tmp_path: Path) -> None:
    bad = tmp_path / "forms.toml"
    bad.write_text("[[form]]\nname = 'odd'\npattern = '^(?P<when>[0-9]+) (?P<day>[0-9]{2}) (?P<month>[0-9]{2}) "
                   "(?P<time>[0-9:]{8})'\n")
    with pytest.raises(ForensicsError, match=r"stamp form 'odd'.*'when'"):
        stamps.forms(bad)
