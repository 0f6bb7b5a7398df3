"""`forensics report` on the reference incident and on its 1 M-entry variant, the size of each
`timeline.html`, beside what a user would otherwise do in the same run: hand the raw events to
plotly express (one point per journal entry, `write_html` with plotly.js inlined).

Target: the 1 M-entry report <= 30 s on this machine; `timeline.html` <= plotly.js + 3 MB, also for
the same story on 64 hosts (`forensics reference --hosts 64`, generated once into bench/.cache/).
The wall time includes papermill starting a kernel, the analysis, the figures, nbconvert and the
files; peak RSS and CPU-seconds are the `forensics` process tree's: the papermill kernel, its child,
is counted with it.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from bench.analyze_reference import CACHE, SCALE
from bench.analyze_reference import inputs as reference_inputs
from bench.inputs import reference_bundle
from bench.measure import Measurement, python, run

HOSTS = int(os.environ.get("BENCH_REPORT_HOSTS", "64"))
REFERENCE = Path(__file__).resolve().parents[1] / "data" / "incidents" / "dsv4-pd-wedge-2026-06-18"

NAIVE_PLOT = """
import sys, time
import plotly.express as px
from forensics import load_case
start = time.perf_counter()
events = load_case(sys.argv[1]).events.select("ts", "unit", "message").collect()
fig = px.scatter(events, x="ts", y="unit", hover_data=["message"])
fig.write_html(sys.argv[2], include_plotlyjs=True)
assert events.height > 0 and len(fig.data[0].x) == events.height, "not every event plotted"
print(time.perf_counter() - start)
"""


def _report(label: str, bundle: Path, out: Path) -> tuple[Measurement, int]:
    shutil.rmtree(out, ignore_errors=True)
    forensics = str(Path(sys.executable).parent / "forensics")
    measured, _ = run(label, [forensics, "report", str(bundle), "--out", str(out)])
    # the work timed is a report of the incident: its first sentence names decode's freeze
    said = (out / "summary.json").read_text()
    if "21:34:47" not in said or "TP_DESYNC" not in said:
        raise RuntimeError(f"{label}: {out / 'summary.json'} does not show the reference incident (decode froze "
                           "at 21:34:47, TP_DESYNC): not the work timed")
    return measured, (out / "timeline.html").stat().st_size


def main() -> None:
    from plotly.offline import get_plotlyjs

    plotly_js = len(get_plotlyjs().encode())
    big_bundle, _, _, entries = reference_inputs()
    rows: list[tuple[Measurement, int | None]] = []
    rows.append(_report("forensics report: reference incident (~10 k entries)", REFERENCE, CACHE / "report-reference"))
    big = CACHE / f"report-x{SCALE}"
    rows.append(_report(f"forensics report: {entries:,} entries", big_bundle, big))
    fleet = reference_bundle(CACHE / f"reference-{HOSTS}hosts", hosts=HOSTS)
    rows.append(_report(f"forensics report: {HOSTS} hosts", fleet, CACHE / f"report-{HOSTS}hosts"))
    naive_html = CACHE / "naive-plot.html"
    naive = python(f"plotly express of the raw events ({entries:,} points)", NAIVE_PLOT,
                   str(big / "case"), str(naive_html))
    rows.append((naive, naive_html.stat().st_size))
    print(f"\n## Reports ({os.cpu_count()} cores); plotly.js is {plotly_js / 2**20:.2f} MiB\n")
    print("| what | seconds | CPU s | peak RSS MiB (process tree, kernel included) | timeline.html MiB "
          "| beyond plotly.js MiB |")
    print("|---|---:|---:|---:|---:|---:|")
    for m, size in rows:
        extra = f"{(size - plotly_js) / 2**20:.2f}" if size else ""
        print(f"| {m.label} | {m.seconds:.1f} | {m.cpu_seconds:.1f} | {m.peak_mib:,.0f} | {size / 2**20 if size else 0:.2f} | {extra} |")
    big_report, big_size = rows[1]
    largest = max(size or 0 for _, size in rows[:3])
    print(f"\ntargets: 1 M-entry report <= 30 s (measured {big_report.seconds:.1f} s); timeline.html <= plotly.js + 3 MiB "
          f"(largest: plotly.js + {(largest - plotly_js) / 2**20:.2f} MiB). The raw plot of every event is "
          f"{naive_html.stat().st_size / big_size:.0f}× the size of timeline.html and shows no finding.")
