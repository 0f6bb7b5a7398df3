"""py-spy --json dumps: the thread array, its context from the capture header, and broken dumps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forensics import sources
from forensics.sources.pyspy.pyspy_json import parse
from tests.conftest import write_file

HEADER = "# capture ts=2026-06-18T21:40:10.500Z host=gpu-node-00 pid=4242 group=decode title=sglang::scheduler_TP3\n"


def _frame(name: str, filename: str, line: int, locals_: list | None = None) -> dict:
    return {"name": name, "filename": f"/opt/venv/lib/{filename}", "module": None, "short_filename": filename,
            "line": line, "locals": locals_, "is_entry": False, "is_shim_entry": False}


THREADS = [
    {"pid": 4242, "thread_id": 140453280347840, "thread_name": "MainThread", "os_thread_id": 4242,
     "active": False, "owns_gil": False, "process_info": None,
     "frames": [_frame("all_reduce", "torch/distributed/distributed_c10d.py", 2050),
                _frame("Scheduler.run_batch", "sglang/srt/managers/scheduler.py", 1700,
                       [{"name": "self", "addr": 1, "arg": True, "repr": "<Scheduler>"}])]},
    {"pid": 4242, "thread_id": 140453292534656, "thread_name": None, "os_thread_id": None,
     "active": True, "owns_gil": True, "process_info": None,
     "frames": [_frame("pthread_cond_wait", "libc.so.6", 0)]},
    {"pid": 4242, "thread_id": 140453292534999, "thread_name": "empty", "os_thread_id": 4250,
     "active": True, "owns_gil": False, "process_info": None, "frames": []},
]
DUMP = json.dumps(THREADS, indent=2) + "\n"


def _write(tmp_path: Path, text: str, name: str = "dump.json") -> Path:
    return write_file(tmp_path, name, text)


def test_threads_frames_and_context(tmp_path: Path) -> None:
    result = parse(_write(tmp_path, HEADER + DUMP))
    result.check_accounting(tmp_path)
    assert (result.records, result.parsed) == (1, 1)
    assert result.rows.select("thread_id", "thread_name", "status", "depth", "function", "file", "line").rows() == [
        (4242, "MainThread", "idle", 0, "all_reduce", "torch/distributed/distributed_c10d.py", 2050),
        (4242, "MainThread", "idle", 1, "Scheduler.run_batch", "sglang/srt/managers/scheduler.py", 1700),
        (140453292534656, None, "active+gil", 0, "pthread_cond_wait", "libc.so.6", None),
        (4250, "empty", "active", None, None, None, None),
    ]
    row = result.rows.row(1, named=True)
    assert row["locals"] == [{"name": "self", "value": "<Scheduler>", "arg": True}]
    assert (row["pid"], row["title"], row["tp"], row["group"], row["host"]) == (
        4242, "sglang::scheduler_TP3", 3, "decode", "gpu-node-00")
    assert row["ts"].isoformat() == "2026-06-18T21:40:10.500000+00:00"


def test_text_and_json_of_one_dump_agree(tmp_path: Path) -> None:
    from forensics.sources.pyspy.pyspy_text import parse as parse_text
    text = """Process 4242: sglang::scheduler_TP3
Python v3.11.7 (/usr/bin/python3.11)

Thread 4242 (idle): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:2050)
        Arguments:
            tensor: <Tensor>
    Scheduler.run_batch (sglang/srt/managers/scheduler.py:1700)
"""
    threads = [{**THREADS[0], "frames": [
        _frame("all_reduce", "torch/distributed/distributed_c10d.py", 2050,
               [{"name": "tensor", "addr": 7, "arg": True, "repr": "<Tensor>"}]),
        _frame("Scheduler.run_batch", "sglang/srt/managers/scheduler.py", 1700)]}]
    columns = ["ts", "host", "group", "pid", "title", "tp", "thread_id", "thread_name", "status", "depth",
               "function", "file", "line", "locals"]
    from_text = parse_text(_write(tmp_path, HEADER + text, "d.txt")).rows.select(columns)
    from_json = parse(_write(tmp_path, HEADER + json.dumps(threads))).rows.select(columns)
    assert from_text.to_dicts() == from_json.to_dicts()


def test_many_dumps_in_one_file(tmp_path: Path) -> None:
    text = HEADER + DUMP + HEADER.replace("pid=4242", "pid=4243").replace("TP3", "TP2") + DUMP
    result = parse(_write(tmp_path, text))
    assert (result.records, result.parsed) == (2, 2)
    assert result.rows.group_by("dump").agg("tp").sort("dump").get_column("tp").to_list() == [[3] * 4, [2] * 4]


BAD = [
    ("cut mid-array", DUMP[: len(DUMP) // 2], "JSON dump cut short: "),
    ("py-spy's failure", "Error: Failed to find python version from target process\n",
     "py-spy failed: Failed to find python version from target process"),
    ("zero threads", "[]\n", "no threads in the dump"),
    ("not threads", '[{"pid": 1}]\n', "array items are not py-spy threads (no 'frames')"),
    ("an object", '{"pid": 1}\n', "expected an array of threads, found a JSON dict"),
]


@pytest.mark.parametrize("body, reason", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_dumps_are_quarantined_and_the_others_parse(tmp_path: Path, body: str, reason: str) -> None:
    good = HEADER.replace("TP3", "TP0") + DUMP
    result = parse(_write(tmp_path, good + HEADER + body))
    result.check_accounting(tmp_path)
    assert (result.records, result.parsed) == (2, 1)
    (got, subject), = result.quarantine.select("reason", "subject").rows()
    assert got.startswith(reason)
    assert subject == "host=gpu-node-00 pid=4242 group=decode title=sglang::scheduler_TP3"
    assert result.quarantine.get_column("line").item() == good.count("\n") + 2


def test_sniffing_picks_the_json_reader(tmp_path: Path) -> None:
    assert sources.detect(_write(tmp_path, HEADER + DUMP)).name == "pyspy_json"
    assert sources.detect(_write(tmp_path, DUMP, "bare.json")).name == "pyspy_json"
