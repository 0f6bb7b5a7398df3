"""Prometheus scrapes: 1,000 snapshots of a 2,000-series SGLang-like exposition (about 2 million
samples) through our reader and prometheus_client's parser, on the same text, in one run. Each
reader's count of samples is checked against the text's sample lines, counted apart from both.

The exposition is what prometheus_client itself serves for the lab's SGLang metrics
(`forensics.lab.sglang_metrics`, padded to 2,000 series), stepped between snapshots; each
snapshot follows a capture header. Printed: seconds, samples per second, peak RSS, peak private
memory (RSS without the pages of the memory-mapped input file) and its ratio to the text size, and
CPU-seconds (the whole process, imports included). Target: >= 3x faster than
`prometheus_client.parser.text_string_to_metric_families`, memory <= 2x the text size.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from bench.measure import Measurement, python

SNAPSHOTS = int(os.environ.get("BENCH_PROM_SNAPSHOTS", "1000"))
SERIES = 2000
CACHE = Path(__file__).resolve().parent / ".cache"

OURS = """
import sys, time
from pathlib import Path
from forensics.sources import get
start = time.perf_counter()
result = get("prometheus_text").parse(Path(sys.argv[1]))
result.check_accounting(Path(sys.argv[1]))
assert result.quarantine.height == 0, f"{result.quarantine.height:,} samples quarantined"
assert result.rows.height == int(sys.argv[2]), f"read {result.rows.height:,} samples of {sys.argv[2]}: not the work timed"
print(result.rows.height, time.perf_counter() - start)
"""

CLIENT = """
import sys, time
from prometheus_client.parser import text_string_to_metric_families
start = time.perf_counter()
text = open(sys.argv[1]).read()
samples = sum(len(family.samples) for family in text_string_to_metric_families(text))
assert samples == int(sys.argv[2]), f"read {samples:,} samples of {sys.argv[2]}: not the work timed"
print(samples, time.perf_counter() - start)
"""

FLOOR = """
import time
import polars
from forensics.sources import get
print(0.0)
"""


def inputs() -> Path:
    """The snapshots file, generated once."""
    CACHE.mkdir(exist_ok=True)
    path = CACHE / f"prom-{SNAPSHOTS}x{SERIES}.prom"
    if not path.exists():
        print(f"generating {SNAPSHOTS:,} snapshots of {SERIES:,} series -> {path}", file=sys.stderr)
        from forensics.lab.sglang_metrics import SGLangMetrics
        core = SGLangMetrics().exposition()
        core_series = sum(1 for line in core.splitlines() if line and not line.startswith("#"))
        engine = SGLangMetrics(extra_series=SERIES - core_series)
        with open(path.with_suffix(".tmp"), "w") as out:
            for n in range(SNAPSHOTS):
                engine.step()
                minute, second = divmod(n * 15, 60)
                hour, minute = divmod(minute, 60)
                out.write(f"# capture ts=2026-06-18T{21 + hour:02d}:{minute:02d}:{second:02d}Z "
                          f"host=gpu-node-00 port=30002\n")
                out.write(engine.exposition())
        path.with_suffix(".tmp").rename(path)
    return path


def count_samples(path: Path) -> int:
    """The sample lines of an exposition, counted apart from either reader (every line that is
    neither blank nor a comment, `# capture` headers included among the comments)."""
    samples = 0
    with open(path, "rb") as text:
        for line in text:
            if line.strip() and not line.startswith(b"#"):
                samples += 1
    return samples


def main() -> None:
    path = inputs()
    samples = count_samples(path)  # also reads the file once, so that both readers find it in the page cache
    size_mib = path.stat().st_size / 2**20
    rows: list[Measurement] = [
        python("forensics prometheus_text -> samples", OURS, str(path), str(samples)),
        python("prometheus_client text_string_to_metric_families", CLIENT, str(path), str(samples),
               note="builds Python objects"),
        python("(python + polars imports alone)", FLOOR, note="memory floor of the Python rows"),
    ]
    ours, client = rows[0], rows[1]
    print(f"\n## Prometheus scrapes: {SNAPSHOTS:,} snapshots x {SERIES:,} series ({samples:,} samples, each "
          f"reader's count checked), {size_mib:,.0f} MiB of text, {os.cpu_count()} cores\n")
    print("| what | seconds (imports excluded) | CPU s (whole process) | samples/s | peak RSS MiB | peak private MiB "
          "| private / text size | ours is N× faster | note |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for m in rows:
        rate = f"{samples / m.seconds:,.0f}" if m is ours or m is client else ""
        ratio = f"{m.seconds / ours.seconds:.1f}" if m is client else ""
        print(f"| {m.label} | {m.seconds:.2f} | {m.cpu_seconds:.2f} | {rate} | {m.peak_mib:,.0f} | {m.peak_anon_mib:,.0f} | "
              f"{m.peak_anon_mib / size_mib:.1f} | {ratio} | {m.note} |")
    print(f"\ntargets: >= 3x faster than prometheus_client (measured {client.seconds / ours.seconds:.1f}x); "
          f"memory <= 2x the text (measured {ours.peak_anon_mib / size_mib:.1f}x in private memory; "
          f"{ours.peak_mib / size_mib:.1f}x counting the pages of the memory-mapped input)")
