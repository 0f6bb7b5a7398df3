"""The cross-rank verdict: phases, groups, rounds, missing ranks and the merged tree, from
py-spy text dumps written the way py-spy writes them."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from forensics.case import ingest, load_case
from forensics.detect.stack_verdict import (
    ALL_IDLE,
    NO_VERDICT,
    UNIFORM_WAIT,
    ORDINARY_WORK,
    PROGRESSING,
    STUCK,
    TP_DESYNC,
)
from forensics.detect.stacks import judge, latest

ALL_REDUCE = ["all_reduce (torch/distributed/distributed_c10d.py:2050)",
              "_exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)",
              "Scheduler.run_batch (sglang/srt/managers/scheduler.py:1700)",
              "Scheduler.event_loop_overlap_disagg_decode (sglang/srt/disaggregation/decode.py:700)"]
ON_IDLE = ["Scheduler.on_idle (sglang/srt/disaggregation/decode.py:760)",
           "Scheduler.event_loop_overlap_disagg_decode (sglang/srt/disaggregation/decode.py:705)"]
HANDSHAKE = ["broadcast (torch/distributed/distributed_c10d.py:2600)",
             "broadcast_pyobj (sglang/srt/utils.py:900)",
             "Scheduler.recv_requests (sglang/srt/managers/scheduler.py:1000)",
             "Scheduler.event_loop_normal_disagg_prefill (sglang/srt/disaggregation/prefill.py:300)"]
COMPUTE = ["forward (sglang/srt/models/deepseek_v2.py:900)",
           "Scheduler.run_batch (sglang/srt/managers/scheduler.py:1700)"]
SYNC = ["synchronize (torch/cuda/streams.py:224)",
        "Scheduler.process_batch_result_disagg_decode (sglang/srt/disaggregation/decode.py:800)"]


def dump(pid: int, title: str, stack: list[str], *, ts: str = "2026-06-18T21:40:10Z", group: str | None = "decode",
         extra_thread: bool = True) -> str:
    header = f"# capture ts={ts} host=gpu-node-00 pid={pid}" + (f" group={group}" if group else "") + "\n"
    frames = "".join(f"    {f}\n" for f in stack)
    other = '"Thread 9 (idle): "pin_memory"\n    _worker_loop (torch/utils/data/worker.py:300)\n' if extra_thread else ""
    return (f"{header}Process {pid}: {title}\nPython v3.11.7 (/usr/bin/python3.11)\n\n"
            f"{other.lstrip(chr(34))}Thread {pid} (idle): \"MainThread\"\n{frames}")


def verdicts(tmp_path: Path, files: dict[str, str], **kwargs: object) -> list:
    bundle = tmp_path / "bundle"
    for name, text in files.items():
        (bundle / name).parent.mkdir(parents=True, exist_ok=True)
        (bundle / name).write_text(text)
    ingest(bundle, tmp_path / "case")
    case = load_case(tmp_path / "case")
    return judge(case.stacks, case.quarantine, **kwargs)


def ranks_file(stacks: dict[int, list[str]], **kwargs: object) -> str:
    return "".join(dump(100 + r, f"sglang::scheduler_TP{r}", s, **kwargs) for r, s in stacks.items())


def test_ranks_split_between_all_reduce_and_on_idle_is_a_desync(tmp_path: Path) -> None:
    (v,) = verdicts(tmp_path, {"stacks/all.txt": ranks_file({0: ALL_REDUCE, 1: ALL_REDUCE, 2: ALL_REDUCE, 3: ON_IDLE})})
    assert (v.group, v.verdict, v.collective) == ("decode", TP_DESYNC, "all_reduce")
    assert v.ranks_by_phase == {"collective": [0, 1, 2], "idle": [3]}
    assert v.called_from == "Scheduler.run_batch (sglang/srt/managers/scheduler.py:1700)"
    assert v.missing == [] and v.holds_without_missing
    assert v.explanation.startswith("decode at 2026-06-18 21:40:10 UTC: TP_DESYNC. Ranks 0, 1, 2 wait in "
                                    "`all_reduce` (torch/distributed/distributed_c10d.py:2050), called from "
                                    "`Scheduler.run_batch (sglang/srt/managers/scheduler.py:1700)`. Rank 3 is "
                                    "idle in `Scheduler.on_idle` (sglang/srt/disaggregation/decode.py:760).")
    classes = sorted((ranks, member.phase.phase) for ranks, member in v.classes())
    assert classes == [([0, 1, 2], "collective"), ([3], "idle")]


@pytest.mark.parametrize("stacks, verdict", [
    ({0: ALL_REDUCE, 1: ALL_REDUCE}, UNIFORM_WAIT),
    ({0: ON_IDLE, 1: HANDSHAKE, 2: ON_IDLE}, ALL_IDLE),  # the idle handshake is idle, not a collective
    ({0: COMPUTE, 1: SYNC}, ORDINARY_WORK),
    ({0: HANDSHAKE, 1: ALL_REDUCE}, TP_DESYNC),
])
def test_other_verdicts(tmp_path: Path, stacks: dict[int, list[str]], verdict: str) -> None:
    (v,) = verdicts(tmp_path, {"stacks/all.txt": ranks_file(stacks)})
    assert v.verdict == verdict


def _fragments(first: list[str], second: list[str], title: str = "sglang::scheduler_TP0") -> str:
    """Two captures pasted as one, the way guides and issues quote them: the second block has no
    `Process` header of its own, so its thread lands in the first block's process."""
    second_block = "".join(f"    {f}\n" for f in second)
    return (dump(117489, title, first, extra_thread=False)
            + f"\nThread 117492 (active+gil): \"MainThread\"\n{second_block}")


def test_fragments_of_two_captures_give_no_hang_verdict(tmp_path: Path) -> None:
    """A process has one main thread: two of them in one process dump are fragments of separate
    captures, not one moment (the corpus' annotated SGLang fragments: "Not one snapshot, so no
    desync verdict"). Alone, the first block would be a rank waiting in a collective."""
    (alone,) = verdicts(tmp_path / "alone", {"stacks/one.txt": dump(117489, "sglang::scheduler_TP0", ALL_REDUCE)})
    assert alone.verdict != NO_VERDICT and alone.collective == "all_reduce"
    (v,) = verdicts(tmp_path / "pasted", {"stacks/pasted.txt": _fragments(ALL_REDUCE, COMPUTE)})
    assert v.verdict == NO_VERDICT and not v.holds_without_missing
    assert "threads 117489, 117492 are all named 'MainThread' in one process dump" in v.explanation
    assert "no verdict is drawn" in v.explanation
    # ranks below it are missing, as in the corpus' TP3 fragment: listed, with no verdict to change
    (v,) = verdicts(tmp_path / "tp3", {"stacks/pasted.txt": _fragments(ALL_REDUCE, COMPUTE, "sglang::scheduler_TP3")})
    assert v.verdict == NO_VERDICT and [m.rank for m in v.missing] == [0, 1, 2]
    assert "Missing: TP0" in v.explanation and "The verdict" not in v.explanation


def test_fragments_that_show_only_work_stay_ordinary_work_and_say_so(tmp_path: Path) -> None:
    """The corpus' kitty report (two runs pasted as one) is ordinary work by its README: fragments
    showing no wait are read as far as that, and the explanation names them."""
    (v,) = verdicts(tmp_path, {"stacks/pasted.txt": _fragments(COMPUTE, COMPUTE)})
    assert v.verdict == ORDINARY_WORK
    assert "not one snapshot of one process" in v.explanation


def test_a_missing_rank_is_listed_and_the_verdict_says_whether_it_holds(tmp_path: Path) -> None:
    files = {"stacks/all.txt": ranks_file({0: ALL_REDUCE, 1: ALL_REDUCE, 3: ON_IDLE})
             + "# capture ts=2026-06-18T21:40:11Z pid=102 group=decode title=sglang::scheduler_TP2\n"
               "Error: Failed to find python version from target process\n"}
    (v,) = verdicts(tmp_path, files)
    assert v.verdict == TP_DESYNC and v.holds_without_missing
    assert [(m.rank, m.reason) for m in v.missing] == [
        (2, "stacks/all.txt line 33: py-spy failed: Failed to find python version from target process")]
    assert "The verdict holds whatever the missing ranks show." in v.explanation

    (v,) = verdicts(tmp_path / "idle", {"stacks/all.txt": ranks_file({0: ON_IDLE, 1: ON_IDLE})},
                    expected={"decode": 4})
    assert v.verdict == ALL_IDLE and not v.holds_without_missing
    assert [(m.rank, m.reason) for m in v.missing] == [(2, "no dump of this rank in the bundle"),
                                                       (3, "no dump of this rank in the bundle")]
    assert "The verdict could change with the missing ranks." in v.explanation


def test_rounds_tell_stuck_from_progressing(tmp_path: Path) -> None:
    first = ranks_file({0: ALL_REDUCE, 1: ALL_REDUCE, 2: COMPUTE}, ts="2026-06-18T21:40:10Z")
    second = ranks_file({0: ALL_REDUCE, 1: ALL_REDUCE, 2: SYNC}, ts="2026-06-18T21:40:20Z")
    all_rounds = verdicts(tmp_path, {"stacks/r1.txt": first, "stacks/r2.txt": second})
    assert [(v.round, v.verdict) for v in all_rounds] == [(0, TP_DESYNC), (1, TP_DESYNC)]
    assert all_rounds[-1].progress == {0: STUCK, 1: STUCK, 2: PROGRESSING}
    assert latest(all_rounds) == [all_rounds[-1]]
    assert "Across rounds, ranks 0, 1 did not move (STUCK). Across rounds, rank 2 moved (PROGRESSING)." in \
        all_rounds[-1].explanation


def test_groups_from_header_path_title_pipeline_stage_and_dp_replica(tmp_path: Path) -> None:
    files = {
        # No group in the header: the folder names the component.
        "stacks/prefill/tp.txt": ranks_file({0: ON_IDLE, 1: ON_IDLE}, group=None),
        "stacks/decode/tp.txt": ranks_file({0: ALL_REDUCE, 1: ON_IDLE}, group=None),
        # Pipeline stages are separate TP groups; so are DP replicas without DP attention.
        "stacks/pp.txt": "".join(dump(300 + i, f"sglang::scheduler_PP{pp}_TP{tp}", ON_IDLE, group=None)
                                 for i, (pp, tp) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)])),
    }
    groups = {v.group: v.ranks_by_phase for v in verdicts(tmp_path, files)}
    assert groups == {"prefill": {"idle": [0, 1]}, "decode": {"collective": [0], "idle": [1]},
                      "sglang::scheduler PP0": {"idle": [0, 1]}, "sglang::scheduler PP1": {"idle": [0, 1]}}

    dp_attention = "".join(dump(400 + r, f"sglang::scheduler_DP{r}_TP{r}_EP{r}", ALL_REDUCE if r else ON_IDLE,
                                group=None) for r in range(4))
    (v,) = verdicts(tmp_path / "dpa", {"stacks/x.txt": dp_attention})
    assert (v.group, v.verdict) == ("sglang::scheduler", TP_DESYNC)
    replicas = "".join(dump(500 + i, f"sglang::scheduler_DP{dp}_TP{tp}", ON_IDLE, group=None)
                       for i, (dp, tp) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]))
    assert [v.group for v in verdicts(tmp_path / "dp", {"stacks/x.txt": replicas})] == [
        "sglang::scheduler DP0", "sglang::scheduler DP1"]


def test_only_the_profiles_processes_and_their_main_thread_are_judged(tmp_path: Path) -> None:
    files = {"stacks/all.txt": ranks_file({0: ALL_REDUCE, 1: ALL_REDUCE})
             + dump(999, "python -m sglang_router.launch_router", ON_IDLE)}
    (v,) = verdicts(tmp_path, files)
    assert v.verdict == UNIFORM_WAIT and sorted(r.pid for r in v.ranks) == [100, 101]


def test_the_merged_tree_counts_ranks_per_frame(tmp_path: Path) -> None:
    (v,) = verdicts(tmp_path, {"stacks/all.txt": ranks_file({0: ALL_REDUCE, 1: ALL_REDUCE, 2: ALL_REDUCE,
                                                             3: ON_IDLE})})
    tree = v.tree()
    root = tree.filter(pl.col("parent") == "")
    assert root.select("label", "value").rows() == [
        ("Scheduler.event_loop_overlap_disagg_decode (sglang/srt/disaggregation/decode.py)", 4)]
    leaves = tree.filter(pl.col("phase").is_not_null()).select("label", "ranks", "phase").rows()
    assert leaves == [("all_reduce (torch/distributed/distributed_c10d.py)", [0, 1, 2], "collective"),
                      ("Scheduler.on_idle (sglang/srt/disaggregation/decode.py)", [3], "idle")]
    assert tree.get_column("id").is_unique().all()
    assert set(tree.get_column("parent")) - {""} <= set(tree.get_column("id"))


def test_groups_passed_explicitly_win(tmp_path: Path) -> None:
    files = {"stacks/all.txt": ranks_file({0: ALL_REDUCE, 1: ON_IDLE}, group=None)}
    bundle_verdicts = verdicts(tmp_path, files, groups_by_pid={100: "engine-a", 101: "engine-a"})
    assert [(v.group, v.verdict) for v in bundle_verdicts] == [("engine-a", TP_DESYNC)]
