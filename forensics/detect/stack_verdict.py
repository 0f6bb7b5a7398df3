"""The verdict on one group of ranks at one round of dumps: the taxonomy's names and what a
`Verdict` holds (docs/analysis.md has the taxonomy with examples):

- `TP_DESYNC`: ranks split across different collectives, or some wait in a collective while
  others are idle or elsewhere. A collective returns only when every rank has entered it.
- `UNIFORM_WAIT`: every rank waits at the same frame (a collective, a device `synchronize`, a
  barrier): the group agrees, so the hang is below Python or in a peer outside the dump.
- `STRAGGLER_OR_MISSING`: the ranks present wait in a collective and others of the group are not
  in the bundle (named, with py-spy's reason when it failed), or one rank alone waits in one.
- `WAITING_IN_ONE_SNAPSHOT`: one round only, and a thread waits on another thread of its process
  (the main thread on a queue's item, joining threads stopped in their own code, or at the line
  another idle thread is stopped at): neither a hang nor "no incident" — a second round would tell.
- `ALL_IDLE`: every rank (two or more) waits for work: nothing reaches the engine.
- `ORDINARY_WORK`: anything else: the stacks show no hang (a single process at work, ranks in
  different phases none of them waiting on the others).
- `NO_VERDICT`: a process dump holds two threads of different ids under the main thread's name
  and its stacks would otherwise show a wait. A process has one main thread, so the text is not one
  snapshot of one process (fragments of separate captures pasted together): no hang can be judged
  from it. Such a dump whose stacks show only work stays `ORDINARY_WORK`, with the fragments named.

With several rounds each rank is `STUCK` (its stack did not move) or `PROGRESSING`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import polars as pl

from forensics.detect.stack_frames import Missing, RankStack, merge_stacks

TP_DESYNC, UNIFORM_WAIT, STRAGGLER_OR_MISSING = "TP_DESYNC", "UNIFORM_WAIT", "STRAGGLER_OR_MISSING"
ALL_IDLE, ORDINARY_WORK = "ALL_IDLE", "ORDINARY_WORK"
WAITING_IN_ONE_SNAPSHOT, NO_VERDICT = "WAITING_IN_ONE_SNAPSHOT", "NO_VERDICT"
VERDICTS = (TP_DESYNC, UNIFORM_WAIT, STRAGGLER_OR_MISSING, WAITING_IN_ONE_SNAPSHOT, ALL_IDLE, ORDINARY_WORK, NO_VERDICT)
#: The verdicts that say the ranks are hung (the one list every detector, the key times and the draft read).
HANG_VERDICTS = (TP_DESYNC, UNIFORM_WAIT, STRAGGLER_OR_MISSING)
STUCK, PROGRESSING = "STUCK", "PROGRESSING"


@dataclass
class Verdict:
    """The judgement of one group at one round, with everything needed to show it."""

    group: str
    round: int
    at: datetime | None
    verdict: str
    collective: str | None
    called_from: str | None
    ranks_by_phase: dict[str, list[int]]
    ranks: list[RankStack]
    missing: list[Missing]
    holds_without_missing: bool
    progress: dict[int, str] = field(default_factory=dict)  # rank -> STUCK / PROGRESSING over rounds
    explanation: str = ""
    waiting: list[str] = field(default_factory=list)  # what one snapshot shows threads waiting on (thread_waits)

    def tree(self) -> pl.DataFrame:
        """The merged prefix tree of the ranks' stacks (outermost first), for an icicle figure."""
        return merge_stacks(self.ranks)

    def classes(self) -> list[tuple[list[int], RankStack]]:
        """Equivalence classes: ranks with the same stack (functions and files), with one member."""
        seen: dict[tuple[tuple[str, str], ...], list[RankStack]] = {}
        for r in self.ranks:
            seen.setdefault(tuple((f.function, f.file) for f in r.frames), []).append(r)
        return [([r.rank for r in members], members[0]) for members in seen.values()]

    def as_dict(self) -> dict[str, object]:
        """What `summary.json` keeps of a verdict."""
        return {
            "group": self.group, "round": self.round + 1, "at": self.at.isoformat() if self.at else None,
            "verdict": self.verdict, "collective": self.collective, "called_from": self.called_from,
            "ranks_by_phase": self.ranks_by_phase,
            "missing_ranks": [{"rank": m.rank, "pid": m.pid, "could_not_be_dumped": m.failed, "reason": m.reason}
                              for m in self.missing],
            "holds_without_missing": self.holds_without_missing,
            "progress": {str(k): v for k, v in self.progress.items()},
            "explanation": self.explanation,
        }


def frame_key(r: RankStack) -> tuple[str, str] | None:
    """Where a rank's phase was decided, without the line (ranks may run different builds)."""
    return (r.phase.frame.function, r.phase.frame.file) if r.phase.frame else None


def fragments(v: Verdict) -> str:
    """Why the verdict's dumps are not one snapshot each (joined fragments), or ""."""
    return "; ".join(r.not_one_snapshot for r in v.ranks if r.not_one_snapshot)
