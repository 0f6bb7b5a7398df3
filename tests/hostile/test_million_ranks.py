"""Rank numbers no job reaches: a py-spy dump whose process title names rank a hundred million or
past Int32, thousands of ranks in c10d's watchdog lines, half a million culprits in a batch's
index. The analysis ends, what it says stays a few lines long, and what was refused says why."""

from __future__ import annotations

from pathlib import Path

import pytest


def _dump(pid: int, title: str, frame: str) -> str:
    return (f"# capture ts=2026-06-18T21:40:10Z host=gpu-node-00 pid={pid} group=decode title={title}\n"
            f"Process {pid}: {title}\nPython v3.11.7 (/usr/bin/python3)\n\n"
            f'Thread {pid} (idle): "MainThread"\n    {frame}\n    main (x.py:2)\n\n')


@pytest.mark.parametrize("rank", ["70000", "99999999999", "0" * 30 + "7", "9" * 5000])
def test_a_dump_titled_with_a_huge_rank_is_quarantined_not_expected_to_have_peers(tmp_path: Path, rank: str) -> None:
    """The stacks detector expects every rank below a group's largest: `TP70000` in one title
    made 69,999 missing ranks (`TP100000000`: out of memory after minutes), `TP99999999999` failed
    the ingest (past Int32) and 5,000 digits past what `int()` reads. Thirty-one digits are refused
    whatever their value."""
    from forensics.analyze import analyze
    from forensics.sources.pyspy.pyspy_text import MAX_TITLE_RANK

    stacks = tmp_path / "bundle" / "stacks"
    stacks.mkdir(parents=True)
    (stacks / "round-1.txt").write_text(
        _dump(1, "sglang::scheduler_TP0", "all_reduce (torch/distributed/distributed_c10d.py:3252)")
        + _dump(2, f"sglang::scheduler_TP{rank}", "on_idle (engine.py:82)"))
    result = analyze(tmp_path / "bundle", tmp_path / "case")
    (entry,) = result.timeline.manifest["inputs"]
    assert entry["records"] == 2 and entry["parsed"] == 1 and entry["quarantined"] == 1
    (reason,) = result.timeline.quarantine.get_column("reason").to_list()
    assert f"over the largest a title may name ({MAX_TITLE_RANK:,})" in reason and len(reason) < 200
    (verdict,) = result.verdicts
    assert len(verdict.missing) == 1 and "over the largest a title may name" in verdict.missing[0].reason
    assert max(len(f.text) for f in result.findings) < 2000


def test_a_json_dump_whose_header_names_a_huge_rank_is_quarantined(tmp_path: Path) -> None:
    from forensics.analyze import analyze

    stacks = tmp_path / "bundle" / "stacks"
    stacks.mkdir(parents=True)
    thread = ('[{"pid": %d, "thread_id": 1, "thread_name": "MainThread", "os_thread_id": %d, "active": false, '
              '"owns_gil": false, "frames": [{"name": "on_idle", "filename": "engine.py", "short_filename": '
              '"engine.py", "line": 82, "locals": null}]}]')
    (stacks / "dumps.json").write_text(
        "# capture ts=2026-06-18T21:40:10Z host=gpu-node-00 pid=1 group=decode title=sglang::scheduler_TP0\n"
        + thread % (1, 1) + "\n# capture ts=2026-06-18T21:40:10Z host=gpu-node-00 pid=2 group=decode "
        "title=sglang::scheduler_TP99999999999\n" + thread % (2, 2) + "\n")
    result = analyze(tmp_path / "bundle", tmp_path / "case")
    (entry,) = result.timeline.manifest["inputs"]
    assert entry["format"] == "pyspy_json" and entry["parsed"] == 1 and entry["quarantined"] == 1
    assert all(len(v.missing) <= 1 for v in result.verdicts)


def test_thousands_of_ranks_in_watchdog_lines_are_a_few_lines_of_the_text_report(tmp_path: Path) -> None:
    """The text report's collectives section had a line per process group and rank: ranks in one
    state are one line now, and past 32 states the rest are counted."""
    from forensics.analyze import analyze
    from forensics.render.text_report import COLLECTIVE_STATES_SHOWN, report_text

    logs = tmp_path / "bundle" / "logs"
    logs.mkdir(parents=True)
    lines = []
    for r in range(4000):  # most ranks in seq 78; ranks past 3,900 each in a state of their own
        seq = 78 if r < 3900 else 1000 + r
        lines.append(f"[rank{r}]:[E810 03:04:10.852000000 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught "
                     f"collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=80, NumelOut=80, "
                     "Timeout(ms)=600000) ran for 600087 milliseconds before timing out.\n")
    (logs / "nccl.log").write_text("".join(lines))
    result = analyze(tmp_path / "bundle", tmp_path / "case")
    assert result.collective_states().get_column("count").sum() == 4000
    text = report_text(result)
    section = text.split("## collectives", 1)[1].split("\n  note:", 1)[0].splitlines()[1:]
    assert len(section) == COLLECTIVE_STATES_SHOWN + 1 and len(text) < 20_000  # 4,000 lines before
    assert section[0] == "  group ? ranks 0–3899: watchdog seq 78, watchdog op ALLREDUCE"
    assert section[-1].startswith("  … and 69 more states of 69 ranks (only the first 32 states are listed")


def test_half_a_million_culprits_are_a_range_in_a_batchs_index() -> None:
    from forensics.report import _verdicts

    summary = {"findings": [{"kind": "collective_timeout",
                             "facts": {"seq": [78], "culprits": [str(r) for r in range(1, 1_000_000, 2)]}}]}
    said = _verdicts(summary)
    assert len(said) < 300  # 3.4 MB before
    assert said.endswith("and 499,984 more (500,000 ranks) never entered it")
