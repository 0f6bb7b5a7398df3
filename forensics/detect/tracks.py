"""Symptom tracks: concurrent problems kept apart.

Findings carry the track their rule gave them (the profile's `[[logs.event]] track`, the main
track otherwise); annotations go where their words point. Per track: the components, the span
and the findings. Two tracks that touch the same component at overlapping times are not merged:
the overlap is stated, with what argues against a common cause (one track seen before the other
began or after it was resolved), and any link is put as a hypothesis to test, never as a cause.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from forensics.detect import Finding, clock
from forensics.detect.stack_verdict import HANG_VERDICTS

#: What the main track is called when nothing on it shows a wedge (a crash loop, a GPU fault, an
#: error seen): the profile's name for it ("wedge") is only given where the evidence shows one.
PLAIN_MAIN_TRACK = "incident"
#: Findings that show work stopped while the processes lived: a freeze, a hang behind green health
#: checks, a stack that did not move, a collective that timed out, a start-up that stalled, a task
#: the kernel found blocked. (A stack or collective verdict shows one when its verdict is a hang.)
WEDGE_KINDS = frozenset({"frozen", "silent_hang", "stuck_process", "collective_timeout", "startup_stall", "hung_task"})


@dataclass
class Track:
    """One symptom track."""

    name: str
    findings: list[Finding] = field(default_factory=list)

    @property
    def components(self) -> list[str]:
        """Components its findings name."""
        return sorted({f.component for f in self.findings if f.component})

    @property
    def first(self) -> datetime | None:
        """Its earliest finding."""
        return min((f.at for f in self.findings if f.at), default=None)

    @property
    def last(self) -> datetime | None:
        """Its latest finding (or end of a finding's window)."""
        return max((f.until or f.at for f in self.findings if f.at), default=None)


def shows_a_wedge(finding: Finding) -> bool:
    """Whether `finding` shows work stopped while the processes lived (`WEDGE_KINDS`)."""
    if finding.kind in ("stack_verdict", "collective_verdict"):
        return finding.facts.get("verdict") in HANG_VERDICTS
    return finding.kind in WEDGE_KINDS


def main_track_named(findings: list[Finding], main: str) -> str:
    """The main track's name for this evidence: the profile's `main` when a finding on it shows a
    wedge, else PLAIN_MAIN_TRACK; the main track's findings are moved to the name given."""
    mine = [f for f in findings if f.track == main]
    if any(shows_a_wedge(f) for f in mine):
        return main
    for f in mine:
        f.track = PLAIN_MAIN_TRACK
    return PLAIN_MAIN_TRACK


def tracks(findings: list[Finding], main: str) -> list[Track]:
    """Findings grouped by track, the main track first."""
    grouped: dict[str, Track] = {}
    for f in sorted(findings, key=lambda f: (f.at is None, f.at)):
        grouped.setdefault(f.track, Track(f.track)).findings.append(f)
    return sorted(grouped.values(), key=lambda t: (t.name != main, t.first is None, t.first))


def links(all_tracks: list[Track], resolved: datetime | None) -> list[str]:
    """For each pair of tracks that share a component in overlapping time: the overlap, what
    speaks against one cause, and the link as a hypothesis."""
    out = []
    for n, a in enumerate(all_tracks):
        for b in all_tracks[n + 1:]:
            shared = sorted(set(a.components) & set(b.components))
            if not shared or not (a.first and b.first and a.last and b.last):
                continue
            if a.last < b.first or b.last < a.first:
                continue
            against = []
            if b.first < a.first:
                against.append(f"the {b.name} was seen at {clock(b.first)}, before the {a.name} began ({clock(a.first)})")
            end = resolved or a.last
            if b.last > end:
                against.append(f"it was seen again at {clock(b.last)}, after the {a.name} was resolved ({clock(end)})")
            out.append(f"The {a.name} and the {b.name} both involve {', '.join(shared)} between {clock(max(a.first, b.first))} "
                       f"and {clock(min(a.last, b.last))}, but nothing in the evidence links them"
                       + (f": {'; '.join(against)}" if against else "")
                       + ". They are kept as separate problems; a common cause is only a hypothesis to test.")
    return out
