"""torchfrtrace's text, read where it is pasted. The blocks here are torch's own format strings with
their values filled in, as its logger prints them (formatter `%(message)s`): the current wording
from torch 2.13's `torch/distributed/flight_recorder/components/utils.py` and `types.py`, the older
from `tools/flight_recorder/components/builder.py` of earlier releases. The lab tests read
torchfrtrace's real output on real dumps (`tests/lab/test_collectives.py`)."""

from __future__ import annotations

from pathlib import Path

from forensics.sources import detect
from forensics.sources.flight_recorder.flight_recorder_text import parse

OLDER = """Not all ranks joining collective 5 at entry 4
group info: 0:default_pg
collective: nccl:all_reduce
missing ranks: {1}
input sizes: [[1024]]
output sizes: [[1024]]
expected ranks: 4
collective state: scheduled
collective stack trace: 
 []
Collective 9 at entry 8 errors
group info: 1:tp_group
collective: nccl:all_gather
input sizes: [[8]]
output sizes: [[16]]
expected ranks: 2
collective state: scheduled
error message: Culprit rank 1; Error type: SIZE_OR_SYNTAX_MISMATCH, Expected input sizes: '[[8]]' does not match found input sizes: '[[4]]'
"""

CURRENT_UNDECIDED = """Not all ranks joining collective, sequence number: 7
internal record id: 6
group info: 0:default_pg
collective: nccl:broadcast
missing ranks: {2, 3}
input sizes: [[42]]
output sizes: [[42]]
world size: 4
expected ranks: {0, 1, 2, 3}
collective state: started
collective stack trace: 
 broadcast at /opt/venv/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py:2837
We cannot decide what's wrong with this collective entry because we missed FR dumps from ranks ({3}) so we don't have enough information. If you want to debug further use -j to dump all raw trace
No errors found for this collective entry, There could be some other reasons why we see collective timeout.
"""


def test_the_older_wording_is_read_with_its_counts(tmp_path: Path) -> None:
    path = tmp_path / "frtrace.txt"
    path.write_text(OLDER)
    assert detect(path).name == "flight_recorder_text"
    result = parse(path)
    rows = result.rows.select("FR_FINDING", "FR_SEQ", "FR_PG", "FR_PG_DESC", "FR_OP", "FR_MISSING", "FR_EXPECTED",
                              "FR_ERRORS").rows()
    assert rows[0] == ("missing", "5", "0", "default_pg", "nccl:all_reduce", "{1}", "4", None)
    assert rows[1][:5] == ("errors", "9", "1", "tp_group", "nccl:all_gather") and "Culprit rank 1" in rows[1][7]
    assert result.rows.get_column("ts").null_count() == 2 and result.quarantine.height == 0
    assert result.records == 2


def test_the_current_wording_with_blocks_it_could_not_decide(tmp_path: Path) -> None:
    path = tmp_path / "frtrace.txt"
    path.write_text("some words a person typed above the paste\n" + CURRENT_UNDECIDED)
    result = parse(path)
    assert result.rows.get_column("FR_FINDING").to_list() == ["missing", "undecided", "no_errors"]
    assert result.rows.get_column("FR_MISSING_DUMPS").to_list() == [None, "{3}", None]
    assert result.rows.get_column("priority").to_list() == [4, 4, 6]
    (bad,) = result.quarantine.iter_rows(named=True)
    assert bad["line"] == 1 and bad["reason"] == "a line outside torchfrtrace's findings"
    assert result.records == 3 + 1


def test_each_block_is_a_verdict_in_the_taxonomy_at_no_time(tmp_path: Path) -> None:
    from forensics.analyze import analyze

    bundle = tmp_path / "ticket"
    bundle.mkdir()
    (bundle / "frtrace.txt").write_text(OLDER + CURRENT_UNDECIDED)
    verdicts = [f for f in analyze(bundle, tmp_path / "case").findings if f.kind == "collective_verdict"]
    assert all(f.at is None for f in verdicts)
    texts = [f.text for f in verdicts]
    assert len(texts) == 4  # "no errors found" names nothing
    assert "STRAGGLER_OR_MISSING. Rank 1 of the group's 4 ranks never joined collective 5 (nccl:all_reduce)" in texts[0]
    assert texts[1].startswith("process group 1 (tp_group), torchfrtrace's text")
    assert "SIZE_MISMATCH. Collective 9 (nccl:all_gather) has errors; culprit rank 1" in texts[1]
    assert "Ranks 2, 3 of the expected ranks 0, 1, 2, 3 never joined collective 7 (nccl:broadcast)" in texts[2]
    assert "no Flight Recorder dump of rank 3" in texts[3]
