"""A stack verdict in words: one paragraph naming the ranks and frames behind it, what it means for
the group and what to look at next, written from the same ranks as its table (`ranks_by_phase`),
so the two never disagree.
"""

from __future__ import annotations

from collections.abc import Sequence

from forensics.detect.stack_frames import Missing, RankStack, phase_where
from forensics.detect.stack_verdict import (
    ALL_IDLE,
    NO_VERDICT,
    PROGRESSING,
    STRAGGLER_OR_MISSING,
    STUCK,
    TP_DESYNC,
    UNIFORM_WAIT,
    WAITING_IN_ONE_SNAPSHOT,
    Verdict,
    fragments,
)

def ranks_text(ranks: Sequence[RankStack]) -> str:
    """`rank 3`, `ranks 0, 1, 2` (TP ranks) or the processes' labels (`pid 4242, pid 4243`)."""
    ordered = sorted(ranks, key=lambda r: r.rank)
    if all(r.label.startswith("TP") for r in ordered):
        return f"{'rank' if len(ordered) == 1 else 'ranks'} {', '.join(str(r.rank) for r in ordered)}"
    return ", ".join(r.label for r in ordered)


def _when(v: Verdict) -> str:
    if v.at is None:
        return ""
    if any(r.ts_confidence == "low" for r in v.ranks):
        return (f" (capture time unknown: {v.at:%Y-%m-%d %H:%M:%S} UTC is a file's modification time, "
                "not when the stacks were taken)")
    return f" at {v.at:%Y-%m-%d %H:%M:%S} UTC"


def _where_the_ranks_are(v: Verdict, by_rank: dict[int, RankStack]) -> list[str]:
    """A sentence per class of ranks: the phase and frames they are in, the collective's waiters
    split by the frame they wait at."""
    parts: list[str] = []
    classes: list[tuple[str, list[RankStack]]] = []
    for phase, numbers in sorted(v.ranks_by_phase.items(), key=lambda kv: kv[0] != "collective"):
        members = [by_rank[n] for n in numbers]
        if phase == "collective":  # which collective each rank waits in is the heart of a desync
            by_frame: dict[str, list[RankStack]] = {}
            for r in members:
                by_frame.setdefault(phase_where(r), []).append(r)
            classes += [(phase, rs) for _, rs in sorted(by_frame.items(), key=lambda kv: -len(kv[1]))]
        else:
            classes.append((phase, members))
    for phase, members in classes:
        frames = sorted({phase_where(r) for r in members})
        word = "are" if len(members) > 1 else "is"
        verb = ("wait in" if len(members) > 1 else "waits in") if phase == "collective" else (
            f"{word} in" if phase == "unknown" else f"{word} {phase.replace('_', ' ')} in")
        caller = f", called from `{members[0].phase.caller}`" if phase == "collective" and members[0].phase.caller \
            else ""
        text = ranks_text(members)
        parts.append(f"{text[0].upper() if text.startswith('rank') else text[0]}{text[1:]} {verb} "
                     f"{' / '.join(frames)}{caller}.")
    return parts


def _what_the_verdict_means(v: Verdict) -> list[str]:
    """What the verdict implies for the group, and what to look at next."""
    parts: list[str] = []
    if v.verdict == TP_DESYNC:
        waiting = [r for r in v.ranks if r.phase.phase == "collective"]
        away = [r for r in v.ranks if r.phase.phase != "collective"]
        if away:
            parts.append(f"A collective returns only when every rank of the group has entered it, so "
                         f"{ranks_text(waiting)} wait for {ranks_text(away)}, which took another path: the group "
                         "is desynchronised and will not make progress until it is restarted.")
        else:
            parts.append("The ranks wait in different collectives, so none of them can complete: the group is "
                         "desynchronised and will not make progress until it is restarted.")
    elif v.verdict == UNIFORM_WAIT and len(v.ranks) == 1:
        parts.append(f"The only rank dumped waited there in all {v.round + 1} rounds: a hang below Python (the device, "
                     "NCCL, the transport) or in a peer outside these dumps, not work passing through. Next: dump "
                     "its peers at the same moment, a `py-spy dump --native` of it, and the device's state "
                     "(nvidia-smi or npu-smi, Xid or device error lines).")
    elif v.verdict == UNIFORM_WAIT:
        parts.append("Every rank waits at the same place, so the ranks agree with each other: the hang is below "
                     "Python (the device, NCCL, the transport) or in a peer outside these dumps. Next: a "
                     "`py-spy dump --native` of one rank, GPU state (nvidia-smi, DCGM XID errors) and the peer "
                     "engine's stacks.")
    elif v.verdict == STRAGGLER_OR_MISSING:
        if v.missing:
            parts.append("The ranks in the bundle wait in a collective for ranks that are not in it: the missing "
                         "ranks are the stragglers or the ones that took another path. Next: dump them.")
        else:
            parts.append("One rank alone waits in a collective: its peers are not in the bundle, so whether the "
                         "group desynced cannot be told. Next: dump every rank of its group at the same moment.")
    elif v.verdict == WAITING_IN_ONE_SNAPSHOT:
        parts.append("In this one snapshot " + "; ".join(v.waiting) + ". One snapshot cannot tell a deadlock from "
                     "a slow producer or a lock passing through: a second round of dumps a few seconds later "
                     "would (the same stacks again: stuck).")
    elif v.verdict == NO_VERDICT and not v.ranks:
        parts.append("No dump of this group could be read, so there is no stack to judge: the processes named "
                     "below are what the bundle says of it.")
    elif v.verdict == NO_VERDICT:
        parts.append(f"{fragments(v)}. A process has one main thread, so this is not one snapshot of one process "
                     "(most likely fragments of separate captures pasted together), and no verdict is drawn from it. "
                     "Next: dump each process again, whole, every rank of the group at the same moment.")
    elif v.verdict == ALL_IDLE:
        parts.append("Every rank waits for work: nothing reaches this engine; look upstream (router, peer engine).")
    else:
        parts.append("No rank waits on another: the stacks show work, not a hang.")
        if joined := fragments(v):
            parts.append(f"{joined}: not one snapshot of one process, read only as far as that.")
    return parts


def _rounds_and_missing(v: Verdict, by_rank: dict[int, RankStack]) -> list[str]:
    """What one round cannot tell, which ranks moved across rounds, and which ranks are missing."""
    parts: list[str] = []
    if v.round == 0 and not v.progress and v.verdict in (TP_DESYNC, UNIFORM_WAIT, STRAGGLER_OR_MISSING):
        parts.append("This is one round of dumps, one snapshot: a second round a few seconds later would tell a "
                     "hang (the same stacks again) from work passing through.")
    if v.progress:
        stuck = [by_rank[r] for r, p in v.progress.items() if p == STUCK and r in by_rank]
        moving = [by_rank[r] for r, p in v.progress.items() if p == PROGRESSING and r in by_rank]
        if stuck:
            parts.append(f"Across rounds, {ranks_text(stuck)} did not move (STUCK).")
        if moving:
            parts.append(f"Across rounds, {ranks_text(moving)} moved (PROGRESSING).")
    failed = [m for m in v.missing if m.failed]
    for m in failed:  # py-spy was pointed at it and failed: which process could not be seen is a fact
        parts.append(f"Not seen: {_undumped(m)} could not be dumped ({m.reason}).")
    if absent := [m for m in v.missing if not m.failed]:
        listed = "; ".join(f"{m.label}: {m.reason}" for m in absent)
        parts.append(f"Missing: {listed}.")
    if v.missing and v.verdict != NO_VERDICT:  # with no verdict drawn, there is none the missing ranks could change
        parts.append("The verdict holds whatever the missing ranks show." if v.holds_without_missing
                     else "The verdict could change with the missing ranks.")
    return parts


def _undumped(m: Missing) -> str:
    """A process py-spy failed on: `rank 1 (PID 163686)`, `PID 163686`, or where its failure is written."""
    if m.rank is not None:
        return f"rank {m.rank}" + (f" (PID {m.pid})" if m.pid is not None else "")
    return f"PID {m.pid}" if m.pid is not None else f"a process ({m.label})"


def explain(v: Verdict) -> str:
    """One paragraph naming the ranks and frames behind a verdict, written from the same ranks as
    its table (`ranks_by_phase`), so the two never disagree."""
    parts = [f"{v.group}{_when(v)}: {v.verdict}."]
    by_rank = {r.rank: r for r in v.ranks}
    parts += _where_the_ranks_are(v, by_rank)
    parts += _what_the_verdict_means(v)
    parts += _rounds_and_missing(v, by_rank)
    return " ".join(parts)
