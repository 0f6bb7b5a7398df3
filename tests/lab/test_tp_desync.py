"""The real thing: 8 ranks on torch.distributed (gloo), a real TP-desync hang, real py-spy dumps.

One lab run serves every test here (starting 8 PyTorch processes takes seconds); the dumps are
captured twice, a second apart, in both py-spy forms.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from forensics.case import ingest, load_case
from forensics.cli import main as cli
from forensics.detect.stacks import ALL_IDLE, STUCK, TP_DESYNC, judge, latest
from forensics.lab.tp_desync import TpDesyncLab


@pytest.fixture(scope="module")
def lab_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[int]]]:
    bundle = tmp_path_factory.mktemp("lab") / "bundle"
    with TpDesyncLab() as lab:
        pids = [r.process.pid for r in lab.ranks]
        lab.trigger()
        lab.capture(bundle, rounds=2, interval=1.0)
    yield bundle, pids


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone in every way that matters, but only its parent can reap it.
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


@pytest.mark.parametrize("form", ["text", "json"])
def test_the_verdict_names_the_split_decode_ranks_and_spares_prefill(
        lab_run: tuple[Path, list[int]], tmp_path: Path, form: str) -> None:
    bundle, _ = lab_run
    manifest = ingest(bundle / "stacks" / form, tmp_path / "case")
    assert manifest["totals"]["quarantined"] == 0 and manifest["totals"]["stack_dumps"] == 16
    case = load_case(tmp_path / "case")
    verdicts = {v.group: v for v in latest(judge(case.stacks, case.quarantine))}
    assert sorted(verdicts) == ["decode", "prefill"]
    decode = verdicts["decode"]
    assert decode.verdict == TP_DESYNC
    assert decode.collective == "all_reduce"
    assert decode.ranks_by_phase == {"collective": [0, 1, 2], "idle": [3]}
    assert "run_batch" in decode.called_from
    assert decode.progress == {0: STUCK, 1: STUCK, 2: STUCK, 3: STUCK}
    assert decode.missing == []
    assert "Ranks 0, 1, 2 wait in `all_reduce`" in decode.explanation
    assert "Rank 3 is idle in `Scheduler.on_idle`" in decode.explanation
    prefill = verdicts["prefill"]
    assert prefill.verdict == ALL_IDLE, prefill.explanation
    assert "collective" not in prefill.ranks_by_phase


def test_the_stacks_command_prints_each_groups_verdict(lab_run: tuple[Path, list[int]], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    bundle, _ = lab_run
    assert cli(["ingest", str(bundle / "stacks" / "text"), "--case", str(tmp_path / "case")]) == 0
    capsys.readouterr()
    assert cli(["stacks", str(tmp_path / "case"), "--expect", "decode=4"]) == 0
    out = capsys.readouterr().out
    assert "== decode: TP_DESYNC" in out and "== prefill: ALL_IDLE" in out
    assert out.count(" collective  all_reduce (torch/distributed/distributed_c10d.py:") == 3


def test_the_lab_leaves_no_process_behind(lab_run: tuple[Path, list[int]]) -> None:
    _, pids = lab_run
    assert len(pids) == 8
    assert [pid for pid in pids if _alive(pid)] == []


def test_the_lab_cleans_up_when_the_block_fails(tmp_path: Path) -> None:
    pids: list[int] = []
    with pytest.raises(RuntimeError, match="a test failing mid-lab"), TpDesyncLab(world=2) as lab:
        pids = [r.process.pid for r in lab.ranks]
        raise RuntimeError("a test failing mid-lab")
    assert len(pids) == 4 and [pid for pid in pids if _alive(pid)] == []
