"""py-spy text as people paste it (tickets, chats, write-ups): every shape is read, rows keep the
user's line numbers, and what the reader changed or guessed is said in the input's notes."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from forensics import sources
from forensics.case import read_bundle
from forensics.detect.stack_verdict import STRAGGLER_OR_MISSING, TP_DESYNC, UNIFORM_WAIT
from forensics.detect.stacks import judge
from forensics.sources.pyspy.pyspy_text import parse
from tests.conftest import write_file

MAIN = 'Thread 3001 (active): "MainThread"\n'
STACK = "    broadcast (torch/distributed/distributed_c10d.py:1191)\n    train (megatron/training.py:851)\n"


def _parse(tmp_path: Path, text: str) -> sources.ParseResult:
    path = write_file(tmp_path, "pasted.txt", text)
    assert sources.detect(path).name == "pyspy_text"
    result = parse(path)
    result.check_accounting(path)
    return result


def _threads(result: sources.ParseResult) -> list[tuple[object, ...]]:
    rows = result.rows.filter(pl.col("depth").fill_null(0) == 0)
    return rows.select("pid", "title", "thread_id", "thread_name", "function", "source_line").rows()


def test_a_dump_without_its_head_is_one_process_named_by_its_main_thread(tmp_path: Path) -> None:
    result = _parse(tmp_path, "Seen on rank 5:\n\n" + MAIN + STACK)
    assert (result.records, result.parsed, result.quarantine.height) == (1, 1, 0)
    assert _threads(result) == [(3001, None, 3001, "MainThread", "broadcast", 4)]
    assert result.rows.get_column("python").to_list() == [None, None]


@pytest.mark.parametrize("shape, text", [
    ("unindented frames", MAIN + STACK.replace("    ", "")),
    ("a markdown block indented by four spaces", "".join("    " + line + "\n" for line in (MAIN + STACK).splitlines())),
    ("a tab-indented block in fences", "```\n" + "".join("\t" + line + "\n" for line in (MAIN + STACK).splitlines())
     + "```\n"),
    ("colour codes", "\x1b[1;33mThread 3001\x1b[0m (active): \"MainThread\"\n    \x1b[32mbroadcast\x1b[0m "
                     "(torch/distributed/distributed_c10d.py:1191)\n    train (megatron/training.py:851)\n"),
])
def test_indent_fences_and_colour_are_looked_through(tmp_path: Path, shape: str, text: str) -> None:
    result = _parse(tmp_path, text)
    assert result.parsed == 1
    assert result.rows.select("function", "file", "line").rows() == [
        ("broadcast", "torch/distributed/distributed_c10d.py", 1191), ("train", "megatron/training.py", 851)]


def test_thread_lines_stacked_over_one_frame_list_each_get_the_frames(tmp_path: Path) -> None:
    text = "4 in:\n```\n" + "".join(f'Thread {n} (active): "MainThread"\n' for n in (11, 12, 13, 14)) + STACK + "```\n"
    result = _parse(tmp_path, text)
    assert result.parsed == 4
    assert [(pid, fn, line) for pid, _, _, _, fn, line in _threads(result)] == [
        (11, "broadcast", 7), (12, "broadcast", 7), (13, "broadcast", 7), (14, "broadcast", 7)]
    assert result.notes == ["line 3: 4 thread lines share one frame list (grouped by the author): each thread gets "
                            "those frames"]


def test_notes_elisions_and_native_frames_without_a_library(tmp_path: Path) -> None:
    text = ("Process 117489: sglang::scheduler_DP3_TP3_EP3\n"
            'Thread 117489 (idle): "MainThread"\n'
            "    pthread_cond_wait (libc.so.6)                   ← genuinely blocked\n"
            "    pthread_cond_timedwait\n"
            "    0x7caaa50b1a9b (?)                              ← unsymbolized (NCCL)\n"
            "    ...\n"
            "    all_gather_into_tensor (torch/distributed/distributed_c10d.py:4193)\n")
    result = _parse(tmp_path, text)
    assert result.parsed == 1 and result.quarantine.height == 0
    assert result.rows.select("depth", "function", "file", "line", "source_line").rows() == [
        (0, "pthread_cond_wait", "libc.so.6", None, 3), (1, "pthread_cond_timedwait", "?", None, 4),
        (2, "0x7caaa50b1a9b", "?", None, 5),
        (3, "all_gather_into_tensor", "torch/distributed/distributed_c10d.py", 4193, 7)]
    assert result.rows.get_column("python").to_list()[0] is None  # no "Python v" line: read, not refused
    assert result.notes == ["line 6: frames left out by whoever pasted the dump ('...')"]


def test_shell_prompts_ps_output_and_prose_between_dumps_are_passed_over(tmp_path: Path) -> None:
    text = ("$ sudo py-spy dump --pid 154482\nwaiting for upstream reply...\n"
            "    PID STAT WCHAN                  CMD\n 154482 S    unix_stream_data_wait  python3 fetcher.py\n"
            "Process 154482: python3 fetcher.py\nPython v3.12.3 (/usr/bin/python3.12)\n\n"
            'Thread 154482 (idle): "MainThread"\n    wait_for_reply (fetcher.py:10)\n')
    result = _parse(tmp_path, text)
    assert (result.records, result.parsed, result.quarantine.height) == (1, 1, 0)
    assert _threads(result) == [(154482, "python3 fetcher.py", 154482, "MainThread", "wait_for_reply", 9)]


def test_sglang_watchdog_dumps_and_failures(tmp_path: Path) -> None:
    ok = ("Pyspy dump for PID 12 (sglang::scheduler_TP0):\nProcess 12: sglang::scheduler_TP0\n"
          "Python v3.11.7 (/usr/bin/python3)\n\nThread 12 (active): \"MainThread\"\n" + STACK)
    failed = "[2026-06-18 21:40:11] Pyspy failed to dump PID 13. Error: /bin/dash: 1: py-spy: not found\n"
    result = _parse(tmp_path, ok + failed)
    assert (result.records, result.parsed) == (2, 1)
    assert result.quarantine.select("line", "reason", "subject").rows() == [
        (8, "py-spy failed: /bin/dash: 1: py-spy: not found", "pid=13")]


def test_a_flame_graph_or_a_web_page_named_txt_is_skipped_with_its_reason(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    write_file(tmp_path / "b", "flame.txt", '<?xml version="1.0"?>\n<svg version="1.1" width="1200">'
               "<text>Thread 1 (idle)</text></svg>\n")
    write_file(tmp_path / "b", "page.txt", "<!DOCTYPE html><html><body>py-spy docs</body></html>\n")
    frames, manifest = read_bundle(tmp_path / "b")
    assert manifest["inputs"] == [] and {s["path"] for s in manifest["skipped"]} == {"flame.txt", "page.txt"}


def _verdict(tmp_path: Path, text: str) -> tuple[str, str]:
    (tmp_path / "b").mkdir()
    write_file(tmp_path / "b", "stacks.txt", text)
    frames, _ = read_bundle(tmp_path / "b")
    (v,) = judge(frames["stacks"], frames["quarantine"])
    return v.verdict, v.explanation


def test_ranks_grouped_by_their_author_over_two_collectives_are_a_desync(tmp_path: Path) -> None:
    other = STACK.replace("broadcast (torch/distributed/distributed_c10d.py:1191)",
                          "all_reduce (torch/distributed/distributed_c10d.py:1316)")
    text = ("".join(f'Thread {n} (active): "MainThread"\n' for n in (1, 2)) + STACK + "\n"
            + "".join(f'Thread {n} (active): "MainThread"\n' for n in (3, 4)) + other)
    verdict, explanation = _verdict(tmp_path, text)
    assert verdict == TP_DESYNC
    assert "pid 3, pid 4 wait in `all_reduce`" in explanation and "pid 1, pid 2 wait in `broadcast`" in explanation


def test_every_rank_at_one_device_synchronize_is_a_uniform_wait(tmp_path: Path) -> None:
    sync = "    synchronize (torch/cuda/streams.py:227)\n    resolve_last_batch_result (scheduler.py:1)\n"
    text = "".join(f"Process {10 + tp}: sglang::scheduler_TP{tp}\nPython v3.12.3 (/usr/bin/python3)\n\n"
                   f'Thread {10 + tp} (active): "MainThread"\n{sync}\n' for tp in range(4))
    verdict, explanation = _verdict(tmp_path, text)
    assert verdict == UNIFORM_WAIT
    assert "UNIFORM_WAIT. Ranks 0, 1, 2, 3 are device sync in `synchronize`" in explanation


def test_one_rank_alone_in_a_collective_says_its_peers_are_missing(tmp_path: Path) -> None:
    verdict, explanation = _verdict(tmp_path, MAIN + STACK)
    assert verdict == STRAGGLER_OR_MISSING and "its peers are not in the bundle" in explanation


def test_a_big_tool_output_is_checked_at_its_ends_and_loses_nothing_in_between(tmp_path: Path) -> None:
    """A 2 MiB canonical dump file (a collector's rounds) with an author's `...` in its middle is not
    normalised (the line-shape marks are searched in its first and last 256 KiB only), and every
    line it cannot read is quarantined with its line: records = parsed + quarantined. The same mark
    near its end, or in a small paste, is normalised as ever."""
    from forensics.sources.pyspy.paste import END_CHARS, WHOLE_CHECK_CHARS, needs_normalizing

    dump = "Process 4242: python train.py\nPython v3.11.2 (/usr/bin/python3)\n\n" + MAIN + STACK + "\n"
    copies = WHOLE_CHECK_CHARS * 2 // len(dump)
    middle = dump * (copies // 2) + "...\n" + dump * (copies // 2)
    assert len(middle) > WHOLE_CHECK_CHARS and middle.index("...\n") > END_CHARS
    assert not needs_normalizing(middle)
    result = _parse(tmp_path, middle)  # check_accounting: every record parsed or quarantined
    assert result.rows.filter(pl.col("depth") == 0).height == 2 * (copies // 2)
    assert needs_normalizing(dump * (copies // 2) + "...\n")
    assert needs_normalizing(dump + "...\n" + dump)
