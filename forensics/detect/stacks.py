"""The cross-rank verdict from py-spy stacks: which phase each rank is in, and whether a group desynced.

Processes are read into ranks and grouped into engines (`forensics.detect.stack_frames`), and into
rounds (one dump per rank each). Per group and round the ranks are judged in the taxonomy of
`forensics.detect.stack_verdict` (docs/analysis.md has it with examples). With several rounds each
rank is `STUCK` (its stack did not move) or `PROGRESSING`. Ranks that should be there (0 … highest
rank seen, or the size given) but have no readable dump are listed as missing, with py-spy's reason
when the bundle holds a failed dump, and the verdict says whether it holds without them. A
verdict's sentence (`forensics.detect.stack_explain`) is written from the same ranks as its table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

from forensics.detect import Evidence, Finding, excerpt
from forensics.profiles import Profile, load_profile
from forensics.detect.registry import Context, detector
from forensics.detect.stack_explain import explain, ranks_text
from forensics.detect.stack_frames import (
    OUTSIDE,
    WAITING_PHASES,
    Missing,
    RankStack,
    dp_attention,
    function_names,
    main_thread_stacks,
    outside_wait,
    phase_where,
    rank_stacks,
    thread_waits,
    unreadable_dumps,
)
from forensics.detect.stack_verdict import (
    ALL_IDLE,
    NO_VERDICT,
    ORDINARY_WORK,
    PROGRESSING,
    STRAGGLER_OR_MISSING,
    STUCK,
    TP_DESYNC,
    UNIFORM_WAIT,
    WAITING_IN_ONE_SNAPSHOT,
    Verdict,
    fragments,
    frame_key,
)

def _assign_rounds(ranks: list[RankStack]) -> None:
    """A new round starts when a rank already seen in the current one shows up again."""
    current: set[int] = set()
    number = 0
    for r in sorted(ranks, key=lambda r: (r.ts is None, r.ts)):
        if r.rank in current:
            number += 1
            current = set()
        current.add(r.rank)
        r.round = number


def _judge(group: str, number: int, ranks: list[RankStack], expected: int | None,
           unreadable: list[Missing], elsewhere: frozenset[int] = frozenset()) -> Verdict:
    by_phase: dict[str, list[int]] = {}
    for r in sorted(ranks, key=lambda r: r.rank):
        by_phase.setdefault(r.phase.phase, []).append(r.rank)
    present = {r.rank for r in ranks}
    numbered = bool(ranks) and all(r.label.startswith("TP") for r in ranks)
    # a rank whose dump failed counts towards the group's size: TP1 failing beside TP0 makes two ranks
    failed_ranks = {m.rank for m in unreadable if m.rank is not None}
    size = expected if expected is not None else (max(present | failed_ranks) + 1 if numbered and present
                                                  else len(present))
    missing: list[Missing] = []
    if numbered:
        for rank in range(size):
            if rank in present or rank in elsewhere:  # a rank dumped in another group is not this group's
                continue
            known = [m for m in unreadable if m.rank == rank]
            missing.append(known[0] if known else Missing(rank, f"TP{rank}", "no dump of this rank in the bundle"))
    # never dropped: a failed rank past the size given, or a pid whose rank is not known, is still named
    missing += [m for m in unreadable if m.rank is None or (not numbered and m.rank not in present)
                or (numbered and m.rank >= size and m.rank not in present)]

    in_collective = [r for r in ranks if r.phase.phase == "collective"]
    others = [r for r in ranks if r.phase.phase != "collective"]
    collective = called_from = None
    if in_collective:
        names = [r.phase.frame.function for r in in_collective if r.phase.frame]
        collective = max(sorted(set(names)), key=names.count) if names else None
        callers = [str(r.phase.caller) for r in in_collective if r.phase.caller]
        called_from = max(sorted(set(callers)), key=callers.count) if callers else None
    collectives = {function_names(r.phase.frame.function)[-1] for r in in_collective if r.phase.frame}
    same_frame = len({frame_key(r) for r in ranks}) == 1
    if in_collective and (others or len(collectives) > 1):
        verdict, holds = TP_DESYNC, True  # the present ranks already disagree
    elif in_collective and (missing or len(ranks) == 1):
        verdict, holds = STRAGGLER_OR_MISSING, True
    elif len(ranks) > 1 and (in_collective or (same_frame and ranks[0].phase.phase in WAITING_PHASES)):
        verdict, holds = UNIFORM_WAIT, not missing
    elif len(ranks) > 1 and all(r.phase.phase == "idle" for r in ranks):
        verdict, holds = ALL_IDLE, not missing
    else:
        verdict, holds = ORDINARY_WORK, not missing
    if not ranks:
        verdict, holds = NO_VERDICT, False  # only failed dumps: no stack to judge
    if verdict != ORDINARY_WORK and any(r.not_one_snapshot for r in ranks):
        verdict, holds = NO_VERDICT, False  # pasted fragments: a wait between them is no real moment's
    at = max((r.ts for r in ranks if r.ts), default=None)
    v = Verdict(group, number, at, verdict, collective, called_from, by_phase, ranks, missing, holds)
    return v


def _stuck_waiting(v: Verdict) -> bool:
    """Whether every rank of a verdict said to be at work stood in the same wait (a device
    synchronize, a collective, a transfer) in every round: then the stacks show a hang, not work."""
    return (v.verdict == ORDINARY_WORK and bool(v.ranks) and not fragments(v)
            and all(v.progress.get(r.rank) == STUCK and r.phase.phase in WAITING_PHASES for r in v.ranks)
            and len({frame_key(r) for r in v.ranks}) == 1)


def judge(stacks: pl.DataFrame | pl.LazyFrame, quarantine: pl.DataFrame | pl.LazyFrame | None = None,
          profile: Profile | None = None, expected: Mapping[str, int] | None = None,
          groups_by_pid: Mapping[int, str] | None = None) -> list[Verdict]:
    """Every group's verdict at every round (latest round last), from a `stacks` frame and the
    quarantine rows of failed dumps. `expected` gives a group's rank count when the highest rank
    itself may be missing; `groups_by_pid` puts processes in groups explicitly, overriding what
    headers, paths and titles say."""
    profile = profile or load_profile()
    processes = main_thread_stacks(stacks, profile)
    waiting = thread_waits(stacks, profile)
    ranks = rank_stacks(processes, profile, groups_by_pid or {})
    if isinstance(quarantine, pl.LazyFrame):
        quarantine = quarantine.collect()
    files: dict[str, set[str]] = {}
    for r in ranks:
        files.setdefault(r.source.rsplit(" line ", 1)[0], set()).add(r.group)
    unreadable = unreadable_dumps(quarantine, profile, split_dp=not dp_attention(processes),
                                  groups_of_files={f: next(iter(g)) for f, g in files.items() if len(g) == 1})
    groups: dict[str, list[RankStack]] = {}
    for r in ranks:
        groups.setdefault(r.group, []).append(r)
    for group, members in groups.items():  # a group with TP ranks: its other processes are no ranks of it
        if any(r.label.startswith("TP") for r in members):
            groups[group] = [r for r in members if r.label.startswith("TP")]
    for group, _ in unreadable:
        groups.setdefault(group, [])
    verdicts = []
    numbered = {group: {r.rank for r in members if r.label.startswith("TP")} for group, members in groups.items()}
    for group in sorted(groups):
        members = groups[group]
        elsewhere = frozenset().union(*(ranks_ for g, ranks_ in numbered.items() if g != group))
        _assign_rounds(members)
        lost = [m for g, m in unreadable if g == group]
        rounds = sorted({r.round for r in members}) or [0]
        history: dict[int, list[tuple[tuple[str, str, int | None], ...]]] = {}
        for r in sorted(members, key=lambda r: r.round):
            history.setdefault(r.rank, []).append(tuple((f.function, f.file, f.line) for f in r.frames))
        for number in rounds:
            v = _judge(group, number, [r for r in members if r.round == number],
                       (expected or {}).get(group), lost, elsewhere)
            waits = [waiting[r.dump] for r in v.ranks if r.dump in waiting]
            if v.ranks and all(r.phase.phase in OUTSIDE for r in v.ranks):  # none at work: each waits outside
                waits += [outside_wait(r) for r in v.ranks if r.dump not in waiting]
            if len(rounds) == 1 and v.verdict == ORDINARY_WORK and waits and not fragments(v):
                v.verdict, v.waiting = WAITING_IN_ONE_SNAPSHOT, waits
            if number == rounds[-1] and len(rounds) > 1:
                v.progress = {rank: STUCK if len(set(seen)) == 1 else PROGRESSING
                              for rank, seen in sorted(history.items()) if len(seen) > 1}
                if _stuck_waiting(v):  # one process, one verdict: the same wait every round is a hang
                    v.verdict, v.holds_without_missing = UNIFORM_WAIT, not v.missing
            v.explanation = explain(v)
            verdicts.append(v)
    return verdicts


def latest(verdicts: Sequence[Verdict]) -> list[Verdict]:
    """The last round's verdict of each group."""
    last: dict[str, Verdict] = {}
    for v in verdicts:
        last[v.group] = v
    return list(last.values())


def findings(stacks: pl.DataFrame, quarantine: pl.DataFrame | None, profile: Profile,
             main_track: str) -> tuple[list[Verdict], list[Finding]]:
    """Every round's verdict placed on the timeline at its capture time (the latest round of each
    group with its explanation), as findings of the main track."""
    verdicts = judge(stacks, quarantine, profile) if stacks.height or (quarantine is not None and quarantine.height) \
        else []
    out = []
    last = latest(verdicts)
    for v in verdicts:
        evidence = [Evidence("stacks", r.source.rsplit(" line ", 1)[0], int(r.source.rsplit(" line ", 1)[1]), None,
                             r.ts, excerpt(f"{r.label}: {r.phase.phase} in {r.phase.frame}")) for r in v.ranks[:8]]
        final = next(f for f in last if f.group == v.group)
        # an earlier round is one snapshot of the rounds the last verdict was judged over: one verdict per process
        text = v.explanation if v in last else (
            f"{v.group}: round {v.round + 1} of {final.round + 1} (judged with the last round: {final.verdict})."
            if final.progress else f"{v.group}: {v.verdict} (round {v.round + 1}).")
        out.append(Finding("stack_verdict", main_track, v.group, v.at, text, None, evidence,
                           facts={"verdict": v.verdict if v in last or not final.progress else final.verdict,
                                  "round": v.round + 1, "ranks": sorted(r.rank for r in v.ranks),
                                  "not_dumped": [{"rank": m.rank, "pid": m.pid, "reason": m.reason}
                                                 for m in v.missing if m.failed]}))
    out += _stuck(last, main_track)
    return verdicts, out


def _stuck(last: Sequence[Verdict], main_track: str) -> list[Finding]:
    """A process whose stack is the same in every round, outside an idle wait: a hang, even when it
    is the only rank dumped (an idle process looks the same every round and is no hang)."""
    out = []
    for v in last:
        stuck = [r for r in v.ranks if v.progress.get(r.rank) == STUCK and r.phase.phase != "idle"]
        if not stuck:
            continue
        where = " / ".join(sorted({phase_where(r) for r in stuck}))
        phases = sorted({r.phase.phase.replace("_", " ") for r in stuck})
        out.append(Finding("stuck_process", main_track, v.group, v.at,
                           f"{v.group}: {ranks_text(stuck)} showed the same stack in all {v.round + 1} rounds of "
                           f"dumps ({' / '.join(phases)} in {where}): {'they' if len(stuck) > 1 else 'it'} did not "
                           "move — a hang, not work passing through."
                           + (" A device synchronize waits on the GPU's queued work, not on a peer rank: look at the "
                              "device (nvidia-smi, Xid lines) and at what was launched before it."
                              if "device_sync" in {r.phase.phase for r in stuck} else ""),
                           None, [Evidence("stacks", r.source.rsplit(" line ", 1)[0],
                                           int(r.source.rsplit(" line ", 1)[1]), None, r.ts,
                                           excerpt(f"{r.label}: {r.phase.phase} in {r.phase.frame}")) for r in stuck[:8]]))
    return out


@detector("stacks")
def run(ctx: Context) -> list[Finding]:
    """Each group's stack verdicts (kept in the context for the detectors after it) as findings."""
    ctx.verdicts, found = findings(ctx.timeline.stacks, ctx.timeline.quarantine, ctx.timeline.profile, ctx.main_track)
    return found
