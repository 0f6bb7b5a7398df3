"""What an analysis looked at and what each look found, as sentences: the basis of "no incident
found", and the checks a report lists beside its findings."""

from __future__ import annotations

import polars as pl

from forensics.detect import Finding, clock, progress
from forensics.detect.stack_verdict import HANG_VERDICTS, NO_VERDICT, Verdict
from forensics.detect.stacks import latest
from forensics.timeline.align import Timeline


def checked(timeline: Timeline, findings: list[Finding], verdicts: list[Verdict]) -> list[str]:
    """What the analysis looked at and what each look found, in sentences built from what the
    detectors ran and found (never a fixed sentence), so that no line denies a finding: said in
    full when no incident was found, so "nothing wrong" is a statement with its basis."""
    t, out = timeline, []
    kinds = {f.kind for f in findings}
    records = sum(e["parsed"] for e in t.manifest["inputs"])
    inputs = len(t.manifest["inputs"])
    if not inputs:
        return ["no readable evidence in the bundle: nothing was checked"
                + (f" ({len(t.manifest['skipped'])} files skipped, each with its reason in the sources table)"
                   if t.manifest["skipped"] else "")]
    out.append(f"{records:,} records read from {inputs} input{'s' if inputs > 1 else ''}")
    lines = progress.last_progress(t)
    if lines.height:
        streams = ", ".join(f"{r['component'] or 'unknown component'}{' ' + r['tag'] if r['tag'] else ''} "
                            f"({'last at ' + clock(r['last']) if r['last'] else 'no time in the evidence'})"
                            for r in lines.head(6).iter_rows(named=True))
        frozen = sorted({f.component or "?" for f in findings if f.kind == "frozen"})
        gap = t.profile.logs.progress_rules.freeze_gap_s  # the profile's, as the detector used it
        out.append(f"progress lines of {lines.height} scheduler{'s' if lines.height > 1 else ''}: {streams}"
                   f"{' …' if lines.height > 6 else ''}; "
                   + f"{', '.join(frozen) or 'none'} stopped for over {gap:.0f} s with work pending")
    else:
        out.append("no progress lines (the profile's batch lines) in the logs: a freeze could not be looked for")
    if verdicts:
        last = latest(verdicts)
        hung = [v for v in last if v.verdict in HANG_VERDICTS]
        said = "; ".join(f"{v.group}: {v.verdict}" for v in last)
        unjudged = [v for v in last if v.verdict == NO_VERDICT]
        out.append(f"py-spy stacks of {len({r.source for v in verdicts for r in v.ranks})} processes: "
                   f"{said} " + ("(a hang shown: see the findings)" if hung or "stuck_process" in kinds
                                     else "(pasted fragments, not one snapshot: not judged)" if unjudged
                                     else "(no hang shown)"))
    else:
        out.append("no py-spy stacks: whether ranks waited on each other could not be looked at")
    series = t.samples.select(pl.col("series").n_unique()).collect().item()
    if series:
        from forensics.timeline.metrics import stalled

        stalls = stalled(t.samples, t.profile).height
        out.append(f"{series:,} metric series; " + (f"{stalls} window{'s' if stalls > 1 else ''} where progress "
                                                   "counters stalled with requests pending" if stalls else
                                                   "no progress counter stalled with requests pending"))
    modes = sorted({e.fault for e in t.profile.logs.events if e.layer is not None and e.fault})
    seen = sorted({e.fault for e in t.profile.logs.events if e.layer is not None and e.fault and e.kind in kinds})
    out.append(f"every log line looked at for: {', '.join(modes)}; "
               + (f"found: {', '.join(seen)}" if seen else "none found"))
    ends = sorted(kinds & {"startup_failure", "startup_stall", "silent_death", "operator_stop"})
    out.append("how each process that started up ended: " + (", ".join(k.replace("_", " ") for k in ends)
                                                             if ends else "nothing abnormal"))
    notable = t.events.filter(pl.col("priority").is_not_null() & (pl.col("priority") <= 3)).height
    after = "after_stop" in kinds
    out.append((f"{notable:,} log records at error priority or worse"
                + (" (those after an operator's stop are its consequences)" if after else ""))
               if notable else "no log record at error priority or worse")
    return out
