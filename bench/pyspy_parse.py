"""py-spy dumps: 1,000 dumps of 64 threads x 40 frames (2.56 M frames) through our readers and the
ways an SRE would otherwise read them.

Prints one table from one run: seconds (imports excluded for the Python rows), CPU-seconds (the
whole process), frames per second and peak RSS of
- our text reader and our `--json` reader building the `stacks` frame;
- a plain Python line-by-line regex reader of the text building the same rows (what one writes in
  a notebook under pressure), and `json.load` plus a loop over threads and frames for the JSON;
- `grep -cE` of the article's frame names over the text (counts lines, builds nothing).
Inputs are generated once into bench/.cache/ (seed 0). Target: >= 200,000 frames/s.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from bench.measure import Measurement, python, run

DUMPS = int(os.environ.get("BENCH_PYSPY_DUMPS", "1000"))
CACHE = Path(__file__).resolve().parent / ".cache"
GREP = "event_loop_overlap_disagg_|event_loop_normal_disagg_|on_idle|all_reduce|broadcast|recv_requests"

OURS = """
import sys, time
from pathlib import Path
from forensics.sources import get
start = time.perf_counter()
result = get(sys.argv[1]).parse(Path(sys.argv[2]))
result.check_accounting(Path(sys.argv[2]))
assert result.rows.height == int(sys.argv[3]), f"read {result.rows.height:,} frames of {sys.argv[3]}: not the work timed"
print(result.rows.height, time.perf_counter() - start)
"""

PLAIN_TEXT = r"""
import re, sys, time
import polars as pl
start = time.perf_counter()
frame_re = re.compile(r"^    (\S.*?) \(([^()]*?)(?::(\d+))?\)$")
thread_re = re.compile(r"^Thread (\S+) \((\S+)\)(?:: \"(.*)\")?$")
process_re = re.compile(r"^Process (\d+): (.*)$")
rows = []
pid = title = thread = status = None
depth = 0
with open(sys.argv[1]) as f:
    for line in f:
        line = line.rstrip("\n")
        if m := frame_re.match(line):
            rows.append((pid, title, thread, status, depth, m[1], m[2], int(m[3]) if m[3] else None))
            depth += 1
        elif m := thread_re.match(line):
            thread, status, depth = int(m[1]), m[2], 0
        elif m := process_re.match(line):
            pid, title = int(m[1]), m[2]
frame = pl.DataFrame(rows, schema=["pid", "title", "thread", "status", "depth", "function", "file", "line"],
                     orient="row")
assert frame.height == int(sys.argv[2]), f"read {frame.height:,} frames of {sys.argv[2]}"
print(frame.height, time.perf_counter() - start)
"""

PLAIN_JSON = r"""
import json, re, sys, time
import polars as pl
start = time.perf_counter()
text = open(sys.argv[1]).read()
rows = []
for part in re.split(r"(?m)^# capture .*$", text):
    if not part.strip():
        continue
    for t in json.loads(part):
        for depth, f in enumerate(t["frames"]):
            rows.append((t["pid"], t["os_thread_id"], depth, f["name"], f["short_filename"], f["line"] or None))
frame = pl.DataFrame(rows, schema=["pid", "thread", "depth", "function", "file", "line"], orient="row")
assert frame.height == int(sys.argv[2]), f"read {frame.height:,} frames of {sys.argv[2]}"
print(frame.height, time.perf_counter() - start)
"""


def inputs() -> tuple[Path, Path, int]:
    """The generated dumps, text and JSON, and how many frames they hold."""
    CACHE.mkdir(exist_ok=True)
    text, as_json = CACHE / f"pyspy-{DUMPS}.txt", CACHE / f"pyspy-{DUMPS}.json"
    if not (text.exists() and as_json.exists()):
        print(f"generating {DUMPS:,} py-spy dumps -> {text}, {as_json}", file=sys.stderr)
        from forensics.lab.synth import write_pyspy_dumps
        write_pyspy_dumps(text.with_suffix(".tmp"), as_json.with_suffix(".jtmp"), DUMPS)
        text.with_suffix(".tmp").rename(text)
        as_json.with_suffix(".jtmp").rename(as_json)
    return text, as_json, DUMPS * 64 * 40


def main() -> None:
    text, as_json, frames = inputs()
    for path in (text, as_json):
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass
    rows: list[Measurement] = [
        python("forensics text -> stacks", OURS, "pyspy_text", str(text), str(frames)),
        python("plain Python regex loop over the text", PLAIN_TEXT, str(text), str(frames)),
        run("grep -cE (article's frame names), text", ["grep", "-cE", GREP, str(text)])[0],
        python("forensics --json -> stacks", OURS, "pyspy_json", str(as_json), str(frames)),
        python("json.load + loop over frames", PLAIN_JSON, str(as_json), str(frames)),
    ]
    rows[2].note = "counts matching lines, builds nothing"
    print(f"\n## py-spy dumps: {DUMPS:,} dumps x 64 threads x 40 frames = {frames:,} frames "
          f"(text {text.stat().st_size / 2**20:,.0f} MiB, JSON {as_json.stat().st_size / 2**20:,.0f} MiB), "
          f"{os.cpu_count()} cores\n")
    print("| what | seconds | CPU s (whole process) | frames/s | peak RSS MiB | ours is N× faster | note |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for m in rows:
        ours = rows[3] if "json" in m.label.lower() else rows[0]
        ratio = "" if m is ours else f"{m.seconds / ours.seconds:.1f}"
        print(f"| {m.label} | {m.seconds:.2f} | {m.cpu_seconds:.2f} | {frames / m.seconds:,.0f} | {m.peak_mib:,.0f} | {ratio} | {m.note} |")
    print(f"\ntarget: >= 200,000 frames/s (text: {frames / rows[0].seconds:,.0f}; JSON: {frames / rows[3].seconds:,.0f})")
