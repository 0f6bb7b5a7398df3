"""py-spy text dumps: every variant py-spy writes, and every way a dump arrives broken."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from forensics import sources
from forensics.sources.pyspy.pyspy_text import parse
from tests.conftest import write_file

HEADER = "# capture ts=2026-06-18T21:40:10Z host=gpu-node-00 pid=4242 group=decode title=sglang::scheduler_TP3\n"
DUMP = """Process 4242: sglang::scheduler_TP3
Python v3.11.7 (/usr/bin/python3.11)

Thread 4242 (idle): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:2050)
    Scheduler.run_batch (sglang/srt/managers/scheduler.py:1700)
Thread 0x7F3A2B4C5700 (active+gil)
    worker (pool.py:10)
        Arguments:
            self: <Pool at 0x7f3a>
        Locals:
            n: 3
    pthread_cond_wait (libc.so.6)
Thread 4250 (active): "tokenizer"
    recv (zmq/sugar/socket.py:800)
"""


def _write(tmp_path: Path, text: str, name: str = "dump.txt") -> Path:
    return write_file(tmp_path, name, text)


def test_every_part_of_a_dump_lands_in_its_column(tmp_path: Path) -> None:
    result = parse(_write(tmp_path, HEADER + DUMP))
    result.check_accounting(tmp_path)
    assert (result.records, result.parsed, result.quarantine.height) == (1, 1, 0)
    rows = result.rows
    assert rows.select("thread_id", "thread_name", "status", "depth", "function", "file", "line").rows() == [
        (4242, "MainThread", "idle", 0, "all_reduce", "torch/distributed/distributed_c10d.py", 2050),
        (4242, "MainThread", "idle", 1, "Scheduler.run_batch", "sglang/srt/managers/scheduler.py", 1700),
        (0x7F3A2B4C5700, None, "active+gil", 0, "worker", "pool.py", 10),
        (0x7F3A2B4C5700, None, "active+gil", 1, "pthread_cond_wait", "libc.so.6", None),
        (4250, "tokenizer", "active", 0, "recv", "zmq/sugar/socket.py", 800),
    ]
    assert rows.get_column("locals").to_list()[2] == [
        {"name": "self", "value": "<Pool at 0x7f3a>", "arg": True},
        {"name": "n", "value": "3", "arg": False},
    ]
    first = rows.row(0, named=True)
    assert first["ts"].isoformat() == "2026-06-18T21:40:10+00:00"
    assert (first["ts_source"], first["ts_confidence"]) == ("header", "high")
    assert (first["host"], first["group"], first["pid"], first["title"], first["python"]) == (
        "gpu-node-00", "decode", 4242, "sglang::scheduler_TP3", "3.11.7")
    assert (first["dp"], first["tp"], first["pp"], first["ep"]) == (None, 3, None, None)
    assert first["source_line"] == 6 and first["format"] == "pyspy:text"


@pytest.mark.parametrize("title, ranks", [
    ("sglang::scheduler_TP3", (None, 3, None, None)),
    ("sglang::scheduler_DP0_TP3", (0, 3, None, None)),
    ("sglang::scheduler_DP3_TP3_EP3", (3, 3, None, 3)),
    ("sglang::scheduler_PP1_TP0", (None, 0, 1, None)),
    ("python -m sglang.launch_server --model-path x", (None, None, None, None)),
])
def test_ranks_come_from_the_title(tmp_path: Path, title: str, ranks: tuple) -> None:
    text = DUMP.replace("sglang::scheduler_TP3", title)
    row = parse(_write(tmp_path, text)).rows.row(0, named=True)
    assert (row["dp"], row["tp"], row["pp"], row["ep"]) == ranks


@pytest.mark.parametrize("python_line", [
    "Python v2.7.18 (/usr/bin/python2.7)", "Python v3.6.15 (/usr/bin/python3.6)",
    "Python v3.12.3 (/usr/bin/python3.12)", "Python v3.13.0 (/opt/python/bin/python3.13)",
])
def test_python_2_7_to_3_13_headers(tmp_path: Path, python_line: str) -> None:
    rows = parse(_write(tmp_path, DUMP.replace("Python v3.11.7 (/usr/bin/python3.11)", python_line))).rows
    assert rows.get_column("python").unique().to_list() == [python_line.split()[1][1:]]


def test_core_dump_mode(tmp_path: Path) -> None:
    text = """Signal 6: /var/crash/core.4242
Process 4242: sglang::scheduler_TP1
Python v3.10.12

Thread 4242 (gil): "MainThread"
    broadcast (torch/distributed/distributed_c10d.py:2600)
Thread 4243
    run (threading.py:975)
"""
    result = parse(_write(tmp_path, text))
    assert result.records == 1 and result.quarantine.height == 0
    assert result.rows.select("pid", "tp", "thread_id", "status", "function").rows() == [
        (4242, 1, 4242, "gil", "broadcast"), (4242, 1, 4243, None, "run")]


def test_many_processes_with_shell_noise_ps_output_and_banners(tmp_path: Path) -> None:
    text = ("$ for pid in $(pgrep -f sglang::scheduler); do py-spy dump --pid $pid; done\n"
            "root      4242  99.0  1.2 sglang::scheduler_TP3\n"
            "=== pid 4242 ===\n" + DUMP + "\n"
            "=== 4243 ===\n" + DUMP.replace("4242", "4243").replace("TP3", "TP2") +
            "$ echo done\ndone\n")
    result = parse(_write(tmp_path, text))
    assert (result.records, result.parsed) == (2, 2)
    assert result.rows.group_by("pid", "tp").len().sort("pid").rows() == [(4242, 3, 5), (4243, 2, 5)]


def test_dumps_without_header_take_time_from_the_file_name_then_mtime(tmp_path: Path) -> None:
    named = parse(_write(tmp_path, DUMP, "decode-20260618T214010Z.txt")).rows.row(0, named=True)
    assert (named["ts"].isoformat(), named["ts_source"], named["ts_confidence"]) == (
        "2026-06-18T21:40:10+00:00", "file name", "high")
    zoneless = parse(_write(tmp_path, DUMP, "2026-06-18_21-40-10.txt")).rows.row(0, named=True)
    assert (zoneless["ts"].isoformat(), zoneless["ts_confidence"]) == ("2026-06-18T21:40:10+00:00", "medium")
    plain = parse(_write(tmp_path, DUMP, "dump.txt")).rows.row(0, named=True)
    assert (plain["ts_source"], plain["ts_confidence"]) == ("file mtime", "low")


def test_one_file_of_many_rounds_each_after_its_header(tmp_path: Path) -> None:
    text = (HEADER + DUMP + HEADER.replace("21:40:10", "21:40:20") + DUMP)
    rows = parse(_write(tmp_path, text)).rows
    assert rows.group_by("dump").agg(pl.col("ts").first()).sort("dump").get_column("ts").dt.second().to_list() == [
        10, 20]


BAD_DUMPS = [
    ("py-spy's own failure",
     "=== pid 4242 ===\nError: Failed to find python version from target process\n",
     "py-spy failed: Failed to find python version from target process", "pid=4242"),
    ("permission denied, with its cause",
     (HEADER + "Error: Permission Denied: Try running again with elevated permissions\n\nCaused by:\n"
      "    Operation not permitted (os error 1)\n"),
     ("py-spy failed: Permission Denied: Try running again with elevated permissions "
      "(Operation not permitted (os error 1))"),
     "host=gpu-node-00 pid=4242 group=decode title=sglang::scheduler_TP3"),
    ("no such process", "Error: No such process (os error 3)\n",
     "py-spy failed: No such process (os error 3)", None),
    ("cut in the middle of a line", DUMP + "Thread 4251 (idl",
     "dump cut short: the file ends in the middle of a line", "pid=4242 title=sglang::scheduler_TP3"),
    ("a damaged frame line", DUMP.replace("    recv (zmq/sugar/socket.py:800)", "    recv (zmq/sugar/soc"),
     "line 15: not a py-spy line: recv (zmq/sugar/soc", "pid=4242 title=sglang::scheduler_TP3"),
    ("a process with zero threads", "Process 4242: sglang::scheduler_TP3\nPython v3.11.7 (/usr/bin/python3)\n\n",
     "no threads in the dump", "pid=4242 title=sglang::scheduler_TP3"),
]


@pytest.mark.parametrize("text, reason, subject", [c[1:] for c in BAD_DUMPS], ids=[c[0] for c in BAD_DUMPS])
def test_bad_dumps_are_quarantined_with_the_reason_and_the_rest_still_parse(
        tmp_path: Path, text: str, reason: str, subject: str | None) -> None:
    good = DUMP.replace("4242", "5000").replace("TP3", "TP0")
    # A cut line must stay the last line of the file; anything else goes before the good dump,
    # since lines after a dump would read as more of that dump.
    result = parse(_write(tmp_path, good + text if reason.startswith("dump cut short") else text + good))
    result.check_accounting(tmp_path)
    assert result.records == 2 and result.parsed == 1
    assert result.rows.get_column("pid").unique().to_list() == [5000]
    assert result.quarantine.select("reason", "subject").rows() == [(reason, subject)]
    assert result.quarantine.get_column("line").item() > 0


@pytest.mark.parametrize("name, text", [
    ("html.txt", "<html><body>502 Bad Gateway</body></html>\n"),
    ("notes.txt", "restarted decode at 21:40:45\n"),
])
def test_text_that_is_not_a_dump_is_not_claimed(tmp_path: Path, name: str, text: str) -> None:
    path = _write(tmp_path, text, name)
    with pytest.raises(sources.WrongFormat):
        sources.detect(path)


def test_garbage_between_dumps_is_noise_not_records(tmp_path: Path) -> None:
    result = parse(_write(tmp_path, "garbage ☃ \x01 line\n" + DUMP + "more garbage\n"))
    assert (result.records, result.parsed, result.quarantine.height) == (1, 1, 0)


def test_sniffing_picks_the_text_reader(tmp_path: Path) -> None:
    assert sources.detect(_write(tmp_path, HEADER + DUMP)).name == "pyspy_text"
    assert sources.detect(_write(tmp_path, HEADER + "Error: No such process\n", "failed.txt")).name == "pyspy_text"


def test_non_ascii_and_native_frames_are_cut_at_the_right_bytes(tmp_path: Path) -> None:
    text = ("Process 1: sglang::scheduler_TP0\nPython v3.11.7 (/usr/bin/python3.11)\n\n"
            "Thread 1 (idle): \"MainThread\"\n"
            "    föö.bär (dïr/bär.py:33)\n"
            "    std::function<void (int)>::operator() (libfoo.so)\n"
            "    <module> (<string>)\n")
    rows = parse(_write(tmp_path, text)).rows
    assert rows.select("function", "file", "line").rows() == [
        ("föö.bär", "dïr/bär.py", 33), ("std::function<void (int)>::operator()", "libfoo.so", None),
        ("<module>", "<string>", None)]


@pytest.mark.parametrize("real", [
    Path(__file__).resolve().parents[2] / "data" / "incidents" / "dsv4-pd-wedge-2026-06-18" / "stacks" / "round-1.txt",
    Path(__file__).resolve().parents[1] / "data" / "serving" / "sglang_pp_watchdog_pyspy_gloo_recv_excerpt_a.log",
])
def test_a_dump_saved_with_windows_line_ends_reads_as_the_same_dump(tmp_path: Path, real: Path) -> None:
    """py-spy's own output (the reference bundle's) and a watchdog's pasted dump (sgl-project/sglang#17941)
    saved with CRLF line ends hold the same dumps at the same line numbers: the first was quarantined
    whole ("not a py-spy line")."""
    crlf = tmp_path / "dump.txt"
    crlf.write_bytes(real.read_bytes().replace(b"\n", b"\r\n"))
    lf, windows = parse(real), parse(crlf)
    assert windows.quarantine.height == lf.quarantine.height
    columns = ["pid", "title", "thread_name", "depth", "function", "file", "line", "source_line"]
    assert windows.rows.select(columns).equals(lf.rows.select(columns)) and lf.rows.height
