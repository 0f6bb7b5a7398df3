"""Key times: started (first anomaly), detected (first alert, annotation or diagnostic action
after it), mitigated (restart issued), resolved (healthy again), with TTD, TTM and TTR from the
start. Their order is checked (started ≤ detected ≤ mitigated ≤ resolved) and a contradiction is
reported as a finding, never smoothed over."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from datetime import datetime

import polars as pl

from forensics.timeline.align import Timeline
from forensics.detect import Evidence, Finding, clock
from forensics.detect.registry import Context, detector
from forensics.detect.stack_verdict import HANG_VERDICTS

ORDER = ("started", "detected", "mitigated", "resolved")


@dataclass
class KeyTimes:
    """The four times (UTC, None when the evidence has none), how each was found, and TTx."""

    started: datetime | None
    detected: datetime | None
    mitigated: datetime | None
    resolved: datetime | None
    how: dict[str, str]
    contradictions: list[str]

    def seconds(self, name: str) -> float | None:
        """Seconds from started to `name`."""
        at = getattr(self, name)
        return (at - self.started).total_seconds() if at and self.started else None

    def as_dict(self) -> dict[str, object]:
        """What summary.json keeps."""
        out: dict[str, object] = {k: (getattr(self, k).isoformat() if getattr(self, k) else None) for k in ORDER}
        out.update(ttd_s=self.seconds("detected"), ttm_s=self.seconds("mitigated"), ttr_s=self.seconds("resolved"),
                   how=self.how, contradictions=self.contradictions)
        return out


def annotation_track(text: str, timeline: Timeline) -> str:
    """The track an annotation speaks of: the first event rule whose annotation pattern matches."""
    for event in timeline.profile.logs.events:
        if event.annotation and re.search(event.annotation, text):
            return event.track
    return timeline.profile.logs.main_track


def key_times(timeline: Timeline, findings: list[Finding]) -> tuple[KeyTimes, list[Finding]]:
    """The key times from the findings of the main track, and any contradiction as a finding."""
    main = timeline.profile.logs.main_track
    how: dict[str, str] = {}
    frozen = sorted((f.at, f.component) for f in findings if f.kind == "frozen" and f.at)
    started = frozen[0][0] if frozen else None
    if frozen:
        how["started"] = f"{frozen[0][1] or 'a scheduler'} froze (last progress line)"
    timeouts = sorted((f.facts["started"], f.at) for f in findings
                      if f.kind == "collective_timeout" and f.facts.get("started") and f.at)
    if started is None and timeouts:
        started = timeouts[0][0]
        how["started"] = "the timed-out collective began (the watchdog's time less how long the work ran)"
    candidates: list[tuple[datetime, str]] = []
    if timeouts:
        candidates.append((timeouts[0][1], "the process group's watchdog caught the collective timeout"))
    for note in timeline.incident.annotations:
        if annotation_track(note.text, timeline) == main:
            candidates.append((note.at, f"annotation: {note.text}"))
    # A dump is a diagnostic action only when something was wrong (a freeze, or stacks showing a
    # hang), and only when its capture time is known (not a copied file's mtime).
    hang = any(f.kind == "stack_verdict" and f.facts.get("verdict") in HANG_VERDICTS for f in findings)
    dumps = (timeline.stacks.filter(pl.col("ts_confidence").cast(pl.String) != "low")
             .get_column("ts").drop_nulls())
    if dumps.len() and (started is not None or hang):
        first_dump = dumps.min()
        candidates.append((first_dump, "first py-spy dump captured"))  # type: ignore[arg-type]
    after = sorted(c for c in candidates if started is None or c[0] >= started)
    detected = after[0][0] if after else None
    if after:
        how["detected"] = after[0][1]
    mitigation = [f for f in findings if f.kind == "mitigation"]
    mitigated = mitigation[0].at if mitigation else None
    if mitigation:
        how["mitigated"] = mitigation[0].text
    healthy = [f.until for f in findings if f.kind == "restart" and f.until is not None]
    resolved = max(healthy) if healthy else None
    if resolved:
        how["resolved"] = "every restarted component answered its health check with 200 again"
    times = KeyTimes(started, detected, mitigated, resolved, how, [])
    extra = []
    present = [(name, getattr(times, name)) for name in ORDER if getattr(times, name)]
    for (a, ta), (b, tb) in itertools.pairwise(present):
        if tb < ta:
            problem = f"{b} ({clock(tb)}) is before {a} ({clock(ta)})"
            times.contradictions.append(problem)
            extra.append(Finding("key_times_contradiction", main, None, tb, f"key times out of order: {problem}.",
                                 None, [Evidence("findings", None, None, None, tb, problem)]))
    return times, extra


@detector("annotations")
def run_annotations(ctx: Context) -> list[Finding]:
    """The incident file's notes, each on the track it speaks of."""
    return [Finding("annotation", annotation_track(note.text, ctx.timeline), None, note.at, note.text)
            for note in ctx.timeline.incident.annotations]


@detector("key_times")
def run_key_times(ctx: Context) -> list[Finding]:
    """Started, detected, mitigated, resolved (kept in the context); their contradictions are said
    last, once every finding they compare is known."""
    ctx.times, ctx.contradictions = key_times(ctx.timeline, ctx.found)
    return []


@detector("key_time_contradictions")
def run_contradictions(ctx: Context) -> list[Finding]:
    """Key times out of order, as findings."""
    return ctx.contradictions
