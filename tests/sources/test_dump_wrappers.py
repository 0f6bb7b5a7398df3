"""The watchdog lines of profiles/pastes/dump_wrappers.toml: every real sample is found as its kind
with the pid it names and the reason it gives (both the samples' own text), a dump pasted under one
is read with that pid, and a wrapper the reader cannot use is refused with the file and the stack."""

from __future__ import annotations

from pathlib import Path

import pytest

from forensics.errors import ForensicsError
from forensics.sources.pyspy import pyspy_text
from forensics.sources.pyspy.dump_wrappers import wrapped, wrappers

SAMPLES = [(w.stack, sample) for w in wrappers() for sample in w.samples]


def test_every_wrapper_has_real_samples_of_each_of_its_kinds_with_their_origin() -> None:
    for wrapper in wrappers():
        kinds = {str(s["kind"]) for s in wrapper.samples}
        assert {"dump", "failed"} <= kinds and ("gave_up" in kinds or wrapper.gave_up is None), wrapper.stack
        assert all(str(s.get("origin", "")).strip() for s in wrapper.samples), wrapper.stack


@pytest.mark.parametrize(("stack", "sample"), SAMPLES, ids=[f"{s}-{i}" for i, (s, _) in enumerate(SAMPLES)])
def test_a_sample_is_found_with_its_pid_and_reason(stack: str, sample: dict) -> None:
    found = wrapped(str(sample["line"]))
    assert found is not None, sample["line"]
    assert (found.kind, int(found.pid)) == (sample["kind"], sample["pid"])
    assert found.why == sample.get("why", "")


@pytest.mark.parametrize(("stack", "sample"), [(s, x) for s, x in SAMPLES if x["kind"] == "failed"],
                         ids=lambda v: v if isinstance(v, str) else str(v["pid"]))
def test_a_failed_attempt_in_a_file_is_quarantined_with_its_pid(tmp_path: Path, stack: str, sample: dict) -> None:
    path = tmp_path / "stacks" / "watchdog.txt"
    path.parent.mkdir()
    path.write_text(f"{sample['line']}\n")
    result = pyspy_text.parse(path)
    assert result.quarantine.get_column("subject").to_list() == [f"pid={sample['pid']}"]


def test_a_wrapper_without_its_pid_group_is_refused_with_the_file_and_stack(tmp_path: Path) -> None:
    bad = tmp_path / "wrappers.toml"
    bad.write_text('[[wrapper]]\nstack = "mine"\nmarks = ["Dumping"]\ndump = \'Dumping (\\d+)\'\n')
    with pytest.raises(ForensicsError) as raised:
        wrappers(bad)
    assert str(raised.value).startswith(f"{bad}: wrapper 'mine': dump must be a pattern with the groups pid")
