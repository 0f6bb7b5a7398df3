"""`python -m bench [NAME…]`: run the named benchmarks (default: all) and print their tables."""

from __future__ import annotations

import sys

from bench import (
    analyze_profile,
    analyze_reference,
    bounded_reads,
    cli_exit,
    cli_startup,
    fleet_scale,
    journal_ingest,
    object_store,
    prom_parse,
    pyspy_parse,
    report_render,
    watch_capture,
)

BENCHMARKS = {"journal_ingest": journal_ingest.main, "pyspy_parse": pyspy_parse.main,
              "prom_parse": prom_parse.main, "analyze_reference": analyze_reference.main,
              "analyze_profile": analyze_profile.main,
              "report_render": report_render.main, "cli_startup": cli_startup.main, "cli_exit": cli_exit.main,
              "watch_capture": watch_capture.main, "fleet_scale": fleet_scale.main,
              "object_store": object_store.main, "bounded_reads": bounded_reads.main}


def main(argv: list[str]) -> int:
    names = argv or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        print(f"unknown benchmark(s) {unknown}; known: {sorted(BENCHMARKS)}", file=sys.stderr)
        return 2
    for name in names:
        BENCHMARKS[name]()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
