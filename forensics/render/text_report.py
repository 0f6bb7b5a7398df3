"""The text the command prints: `forensics analyze`'s report (the findings, tracks, key times,
collectives, what was checked and the files skipped, in plain sentences, one line each whatever the
evidence quotes), what a case holds (`ingest`, `summary`) and the stack verdicts (`stacks`)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import TextIO

from forensics.analyze import Analysis, in_display_zone, no_incident_heading, profile_said
from forensics.detect import clock, rank_list, span
from forensics.render.metric_panels import idle_gpus_sentence

COLLECTIVE_STATES_SHOWN = 32  # states of the collectives the text report lists, then a count
NO_CLOCK = "--:--:--"  # where a finding's time would be printed, for one the evidence gives no time
SKIPPED_SHOWN = 20  # files skipped listed one by one, then counted (each is in summary.json)


# Where `str.splitlines` ends a line: inside one line of the text report (a title, a finding
# quoting evidence, a host name) each is written out, so that evidence holding "…\n## track: …"
# cannot begin a line that poses as the report's own.
_LINE_BREAKS = str.maketrans({c: f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"
                              for c in (0x0A, 0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x85, 0x2028, 0x2029)})


def report_text(analysis: Analysis) -> str:
    """The findings, tracks and key times in plain sentences, times in the analysis' display zone;
    each of its lines one line, whatever the evidence it quotes holds."""
    with in_display_zone(analysis):
        return "\n".join(line.translate(_LINE_BREAKS) for line in _report_text(analysis))


def _report_text(analysis: Analysis) -> list[str]:
    t = analysis.key_times
    lines = [f"# {analysis.timeline.incident.title}", profile_said(analysis), ""]
    lines.append(f"key times ({analysis.display_zone}):")
    for name in ("started", "detected", "mitigated", "resolved"):
        at = getattr(t, name)
        lines.append(f"  {name:<9} {clock(at) if at else '—':<9} {t.how.get(name, 'not in the evidence')}")
    measures = [(label, t.seconds(name)) for label, name in (("TTD", "detected"), ("TTM", "mitigated"),
                                                            ("TTR", "resolved"))]
    lines.append("  " + "   ".join(f"{label} {span(s) if s is not None else '—'}" for label, s in measures))
    for problem in t.contradictions:
        lines.append(f"  CONTRADICTION: {problem}")
    if idle := idle_gpus_sentence(analysis):  # what the page's first screen says beside its answer
        lines += ["", idle]
    for track in analysis.tracks:
        when = f"{clock(track.first)}–{clock(track.last)}" if track.first else "no time in the evidence"
        lines += ["", f"## track: {track.name} ({', '.join(track.components) or 'no component'}, {when})"]
        for f in track.findings:
            if analysis.superseded(f):
                continue
            lines.append(f"  {clock(f.at) if f.at else NO_CLOCK}  [{f.kind}] {f.text}")
    if analysis.links:
        lines += ["", "## between tracks"] + [f"  {text}" for text in analysis.links]
    states = analysis.collective_states()
    if states.height:
        lines += ["", "## collectives (per process group, the ranks in one state together)"]
        for row in states.head(COLLECTIVE_STATES_SHOWN).iter_rows(named=True):
            said = [f"{name} {row[key]}" for name, key in (
                ("seq", "seq"), ("op", "op"), ("state", "state"), ("sizes", "sizes"),
                ("last enqueued", "last_enqueued"), ("last completed", "last_completed"),
                ("watchdog seq", "watchdog_seq"), ("watchdog op", "watchdog_op"), ("stack", "stack_phase"))
                if row[key] is not None]
            job = f"{row['job'].split('/')[0]} " if row["job"] else ""
            ranks = f"rank {row['ranks'][0]}" if row["count"] == 1 else f"ranks {rank_list(row['ranks'])}"
            lines.append(f"  {job}group {row['pg']} {ranks}: " + ", ".join(said))
        if states.height > COLLECTIVE_STATES_SHOWN:
            rest = states.slice(COLLECTIVE_STATES_SHOWN)
            lines.append(f"  … and {rest.height:,} more states of {rest.get_column('count').sum():,} ranks (only the "
                         f"first {COLLECTIVE_STATES_SHOWN} states are listed one by one; summary.json's findings and "
                         "the report's collectives table hold every rank)")
    if not analysis.incident_found:
        lines += ["", "## " + no_incident_heading(analysis)] + [f"  - {line}" for line in analysis.checked()]
    checks = analysis.timeline.clock_checks
    if checks.height:
        lines += ["", "## clocks"]
        for row in checks.iter_rows(named=True):
            lines.append(f"  {row['host']}: zone {row['time_zone']}, offset {row['offset_applied_s']:+.3f} s "
                         f"({row['offset_source']}); "
                         f"log-line stamps minus journald: median {row['line_minus_journal_s']:+.2f} s "
                         f"(spread {row['spread_s']:.2f} s over {row['lines']:,} lines)")
    for note in analysis.timeline.incident.notes:
        lines.append(f"  note: {note}")
    return lines + _skipped(analysis)


def _skipped(analysis: Analysis) -> list[str]:
    """The bundle's files that were not read, each with why (the first SKIPPED_SHOWN, then a count)."""
    skipped = analysis.timeline.manifest.get("skipped") or []
    if not skipped:
        return []
    lines = ["", f"## files skipped ({len(skipped):,}: not read, each with why)"]
    lines += [f"  {s['path']}: {s['reason']}" for s in skipped[:SKIPPED_SHOWN]]
    if len(skipped) > SKIPPED_SHOWN:
        lines.append(f"  … and {len(skipped) - SKIPPED_SHOWN:,} more (summary.json names them)")
    return lines


def print_summary(case_dir: Path | str, out: TextIO | None = None) -> None:
    """Print what a case holds: inputs, records seen = parsed + quarantined, hosts and units."""
    import polars as pl

    from forensics.case.opened import host_unit_summary, instance_summary, load_case

    out = out or sys.stdout
    case = load_case(case_dir)
    m = case.manifest
    t = m["totals"]
    print(f"case {case_dir}  (bundle {m['bundle']})", file=out)
    print(f"window {m['first_ts']} .. {m['last_ts']}", file=out)
    print(f"records seen {t['records']:,} = parsed {t['parsed']:,} + quarantined {t['quarantined']:,}"
          f"; {t['duplicates']:,} duplicates of records already read; {t['events']:,} events", file=out)
    print("\ninputs:", file=out)
    for e in m["inputs"]:
        line = (f"  {e['path']:<44} {e['format']:<15} records {e['records']:>9,}  parsed {e['parsed']:>9,}  "
                f"quarantined {e['quarantined']:>6,}  duplicates {e['duplicates']:>6,}")
        print(line + (f"  ERROR {e['error']}" if e.get("error") else ""), file=out)
    for s in m["skipped"]:
        print(f"  skipped {s['path']}: {s['reason']}", file=out)
    print("\nper host and unit:", file=out)
    with pl.Config(tbl_rows=100, tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True,
                   fmt_str_lengths=60, tbl_width_chars=160):
        print(host_unit_summary(case), file=out)
        instances = instance_summary(case)
        if instances.height:
            print("\nmetrics per instance:", file=out)
            print(instances, file=out)
        reasons = (case.quarantine.group_by("reason").len().sort("len", descending=True).head(10).collect())
        if reasons.height:
            print("\nquarantine (top reasons):", file=out)
            print(reasons, file=out)


def print_stacks(case_dir: Path | str, profile: str, expected: dict[str, int], every_round: bool,
                 groups_by_pid: dict[int, str] | None = None, out: TextIO | None = None) -> None:
    """Print each group's stack verdict with its explanation and the phase of every rank."""
    out = out or sys.stdout
    from forensics.case.opened import load_case
    from forensics.detect.stacks import judge, latest
    from forensics.profiles import load_profile

    case = load_case(case_dir)
    verdicts = judge(case.stacks, case.quarantine, load_profile(profile), expected, groups_by_pid)
    if not verdicts:
        print(f"no py-spy dumps in {case_dir}", file=out)
        return
    for v in verdicts if every_round else latest(verdicts):
        rounds = f" (round {v.round + 1})" if every_round else ""
        print(f"== {v.group}{rounds}: {v.verdict}", file=out)
        print(textwrap.fill(v.explanation, width=110), file=out)
        for r in sorted(v.ranks, key=lambda r: r.rank):
            frame = str(r.phase.frame) if r.phase.frame else "-"
            moved = v.progress.get(r.rank, "")
            print(f"   {r.label:<8} pid {r.pid or '-':<8} {r.phase.phase:<11} {frame:<70} {moved}", file=out)
        for m in v.missing:
            print(f"   {m.label:<8} MISSING  {m.reason}", file=out)
        print(file=out)
