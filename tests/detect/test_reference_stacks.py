"""The captured lab dumps that serve as fixtures: the reference incident's text rounds and the
`--json` rounds under tests/data/pyspy/lab give the same verdicts as the live lab."""

from __future__ import annotations

from pathlib import Path

import pytest

from forensics.case import ingest, load_case
from forensics.detect.stack_verdict import ALL_IDLE, STUCK, TP_DESYNC
from forensics.detect.stacks import judge, latest
from tests.conftest import REPO

FIXTURES = {
    "reference text rounds": REPO / "data" / "incidents" / "dsv4-pd-wedge-2026-06-18",
    "lab --json rounds": REPO / "tests" / "data" / "pyspy" / "lab",
}


@pytest.mark.parametrize("bundle", FIXTURES.values(), ids=FIXTURES.keys())
def test_captured_dumps_show_the_decode_desync_and_an_idle_prefill(bundle: Path, tmp_path: Path) -> None:
    manifest = ingest(bundle, tmp_path / "case")
    assert (manifest["totals"]["stack_dumps"], manifest["totals"]["quarantined"]) == (16, 0)
    case = load_case(tmp_path / "case")
    verdicts = {v.group: v for v in latest(judge(case.stacks, case.quarantine))}
    decode, prefill = verdicts["decode"], verdicts["prefill"]
    assert (decode.verdict, decode.collective) == (TP_DESYNC, "all_reduce")
    assert decode.ranks_by_phase == {"collective": [0, 1, 2], "idle": [3]}
    assert decode.progress == dict.fromkeys(range(4), STUCK)
    assert prefill.verdict == ALL_IDLE
    assert decode.at is not None and decode.at.strftime("%H:%M") == "21:40"
