"""The cross-rank verdict from py-spy stacks: which phase each rank is in, and whether a group desynced.

For each process the main thread's frames are walked innermost first; the profile's first rule
that matches a frame gives the process's phase (collective, idle, transfer, device_sync, compute,
unknown). Processes are grouped into engines (the TP group: the header's `group`, else a
component named in the file's path or the title, split by pipeline stage and, unless DP
attention is on, by DP replica; a dump with neither is grouped by its file) and into rounds (one
dump per rank each). Per group and round the stacks are merged into a prefix tree, the way LLNL's
STAT merges traces, and judged (docs/analysis.md has the taxonomy with examples):

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

When the bundle holds processes the profile names (`[stacks] process_title`), only those are
judged; a bundle of other dumps (a training job, any Python service) has all its processes judged.
With several rounds each rank is `STUCK` (its stack did not move) or `PROGRESSING`. Ranks that
should be there (0 … highest rank seen, or the size given) but have no readable dump are listed
as missing, with py-spy's reason when the bundle holds a failed dump, and the verdict says whether
it holds without them. A verdict's sentence is written from the same ranks as its table.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import polars as pl

from forensics.detect import Evidence, Finding
from forensics.profiles import Profile, StackRules, load_profile
from forensics.detect.registry import Context, detector

TP_DESYNC, UNIFORM_WAIT, STRAGGLER_OR_MISSING = "TP_DESYNC", "UNIFORM_WAIT", "STRAGGLER_OR_MISSING"
ALL_IDLE, ORDINARY_WORK = "ALL_IDLE", "ORDINARY_WORK"
WAITING_IN_ONE_SNAPSHOT, NO_VERDICT = "WAITING_IN_ONE_SNAPSHOT", "NO_VERDICT"
VERDICTS = (TP_DESYNC, UNIFORM_WAIT, STRAGGLER_OR_MISSING, WAITING_IN_ONE_SNAPSHOT, ALL_IDLE, ORDINARY_WORK, NO_VERDICT)
# Where a Python thread blocks on another thread of its process (the standard library's own files)
_THREAD_SYNC_FILE = re.compile(r"(^|/)(threading|queue)\.py$")
_STDLIB_WAIT_FILE = re.compile(r"(^|/)(threading|queue|selectors|socket|ssl|subprocess|asyncio/[a-z_]+|"
                               r"concurrent/futures/[a-z_]+|multiprocessing/[a-z_]+)\.py$")
# packages whose frames say how a wait was reached, not which of the program's own calls reached it
_THIRD_PARTY_FILE = re.compile(r"(^|/)(httpcore|httpx|requests|urllib3|aiohttp|anyio|huggingface_hub|transformers|"
                               r"torch|torch_npu|tqdm|filelock|http|urllib|email|concurrent|asyncio|multiprocessing)/"
                               r"|(^|/)(ssl|socket|selectors|threading|queue|subprocess)\.py$")
WAITING_PHASES = ("collective", "device_sync", "transfer", "network")  # a rank here waits on something outside it
#: what a single process waits on when its main thread is in one of these phases, in words
_OUTSIDE = {"device_sync": "the device (its stream has not finished a copy or a kernel)",
            "network": "the network (a download, a hub or HTTP call)"}
STUCK, PROGRESSING = "STUCK", "PROGRESSING"
_FRAME_TEXT = re.compile(r"^(?P<function>\S.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


@dataclass(frozen=True)
class Frame:
    """One stack frame."""

    function: str
    file: str
    line: int | None = None

    @classmethod
    def parse(cls, text: str) -> Frame:
        """A frame from py-spy's `function (file:line)` text."""
        match = _FRAME_TEXT.match(text.strip())
        if not match:
            raise ValueError(f"not a frame: {text!r}")
        line = match["line"]
        return cls(match["function"], match["file"], int(line) if line else None)

    def __str__(self) -> str:
        return f"{self.function} ({self.file}{f':{self.line}' if self.line is not None else ''})"


@dataclass(frozen=True)
class Phase:
    """What one process was doing, and the frames that say so."""

    phase: str
    frame: Frame | None  # the frame the rule matched
    caller: Frame | None  # nearest frame further out that is not library code
    why: str


def _ignored(frame: Frame, rules: StackRules) -> bool:
    return bool(rules.ignore_files.search(frame.file) or _matches(rules.ignore_functions, frame.function))


def _names(function: str) -> tuple[str, ...]:
    """A function's name as py-spy prints it, and bare: Python 3.11+ qualifies methods (`Scheduler.on_idle`)."""
    bare = function.rsplit(".", 1)[-1]
    return (function,) if bare == function else (function, bare)


def _matches(pattern: re.Pattern[str], function: str) -> bool:
    return any(pattern.search(name) for name in _names(function))


def classify(frames: Sequence[Frame], rules: StackRules) -> Phase:
    """The phase of a stack (innermost first): the first rule matching the innermost frame it can.
    Function patterns are tried on the name as printed and without its class (`Scheduler.`)."""
    for depth, frame in enumerate(frames):
        if _ignored(frame, rules):
            continue
        outer = frames[depth + 1:]
        for rule in rules.phases:
            if not _matches(rule.function, frame.function):
                continue
            if rule.file is not None and not rule.file.search(frame.file):
                continue
            if rule.under is not None and not any(_matches(rule.under, f.function) for f in outer):
                continue
            caller = next((f for f in outer if not _ignored(f, rules)
                           and not rules.library_files.search(f.file)), None)
            return Phase(rule.phase, frame, caller, rule.why)
    return Phase("unknown", frames[0] if frames else None, None, "no rule of the profile matches its frames")


@dataclass
class RankStack:
    """One process in one dump: who it is and what its main thread was doing."""

    group: str
    rank: int
    label: str  # "TP3", or "pid 4242" when the title names no rank
    pid: int | None
    title: str | None
    host: str | None
    ts: datetime | None
    source: str  # file and line of the dump
    frames: tuple[Frame, ...]
    phase: Phase
    round: int = 0
    ts_confidence: str | None = None  # how sure the capture time is: high, medium or low (a file's mtime)
    dump: tuple[str, int | None] | None = None  # (file, dump number) of the capture, for its other threads
    not_one_snapshot: str | None = None  # why the dump cannot be one capture of one process, if it cannot


@dataclass
class Missing:
    """A rank the group should have but no readable dump shows."""

    rank: int | None
    label: str
    reason: str


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
            "missing_ranks": [{"rank": m.rank, "reason": m.reason} for m in self.missing],
            "holds_without_missing": self.holds_without_missing,
            "progress": {str(k): v for k, v in self.progress.items()},
            "explanation": self.explanation,
        }


@dataclass
class _Node:
    parent: str
    label: str
    ranks: list[int] = field(default_factory=list)
    phase: str | None = None


def merge_stacks(ranks: Sequence[RankStack]) -> pl.DataFrame:
    """A prefix tree over stacks, outermost frame at the root: one row per node with the ranks
    passing through it (`ids`/`parents`/`labels`/`values` for plotly's icicle)."""
    nodes: dict[str, _Node] = {}
    for r in ranks:
        parent = ""
        for frame in reversed(r.frames):
            label = f"{frame.function} ({frame.file})"
            node_id = f"{parent}/{label}" if parent else label
            node = nodes.setdefault(node_id, _Node(parent, label))
            node.ranks.append(r.rank)
            if r.phase.frame == frame:
                node.phase = r.phase.phase
            parent = node_id
    return pl.DataFrame({
        "id": list(nodes),
        "parent": [n.parent for n in nodes.values()],
        "label": [n.label for n in nodes.values()],
        "ranks": [sorted(n.ranks) for n in nodes.values()],
        "value": [len(n.ranks) for n in nodes.values()],
        "phase": [n.phase for n in nodes.values()],
    }, schema={"id": pl.String, "parent": pl.String, "label": pl.String, "ranks": pl.List(pl.Int64),
               "value": pl.Int64, "phase": pl.String})


def _dp_attention(processes: pl.DataFrame) -> bool:
    """SGLang with DP attention titles every rank DPn_TPn (same n): DP does not split TP groups."""
    both = processes.filter(pl.col("dp").is_not_null() & pl.col("tp").is_not_null())
    return both.height > 0 and both.select((pl.col("dp") == pl.col("tp")).all()).item()


def group_of(profile: Profile, group: str | None, path: str | None, title: str | None,
             dp: int | None, pp: int | None, *, split_dp: bool) -> str:
    """The engine (TP group) a process belongs to: header group, else a component named in the
    path or title, else the title without its rank tags; split by pipeline stage and DP replica."""
    base = (group or profile.component_of(path) or profile.component_of(title)
            or (re.sub(r"[_-]?(DP|TP|PP|EP)\d+", "", title.split()[0]) if title else None)
            or (path.rsplit("/", 1)[-1] if path else "unknown"))
    if pp is not None:
        base += f" PP{pp}"
    if dp is not None and split_dp:
        base += f" DP{dp}"
    return base


def main_thread_stacks(stacks: pl.DataFrame | pl.LazyFrame, profile: Profile) -> pl.DataFrame:
    """One row per dump of a judged process: its context and main-thread frames (innermost first).

    The main thread is the one named as the profile says, else the one whose id is the pid, else
    the first thread of the dump; `main_ids` lists every thread id under the main thread's name."""
    frame = stacks.lazy() if isinstance(stacks, pl.DataFrame) else stacks
    rules = profile.stacks
    dump = ["source_file", "dump"]
    score = (pl.when(pl.col("thread_name") == rules.main_thread).then(0)
             .when(pl.col("thread_id") == pl.col("pid")).then(1).otherwise(2))
    profiled = pl.col("title").str.contains(rules.process_title.pattern)
    if frame.select(profiled.any()).collect().item():  # the profile's processes, when there are any
        frame = frame.filter(pl.col("title").is_null() | profiled)
    chosen = (frame.with_columns(score.alias("_score"), pl.int_range(pl.len()).over(dump).alias("_order"))
              .filter(pl.col("_score") == pl.col("_score").min().over(dump))
              .filter(pl.col("thread_id") == pl.col("thread_id").sort_by("_order").first().over(dump)))
    main_ids = (frame.filter(pl.col("thread_name") == rules.main_thread)
                .group_by(dump).agg(pl.col("thread_id").drop_nulls().unique(maintain_order=True).alias("main_ids")))
    return (chosen.sort("depth", nulls_last=True)
            .group_by(dump, maintain_order=True)
            .agg(pl.col("ts", "ts_confidence", "host", "group", "pid", "title", "dp", "tp", "pp", "ep").first(),
                 pl.col("source_line").min().alias("first_line"),
                 pl.struct("function", "file", "line").filter(pl.col("depth").is_not_null()).alias("frames"))
            .join(main_ids, on=dump, how="left", maintain_order="left")
            .sort("ts", "source_file", "dump", nulls_last=True)
            .collect())


def _rank_stacks(processes: pl.DataFrame, profile: Profile, by_pid: Mapping[int, str]) -> list[RankStack]:
    split_dp = not _dp_attention(processes)
    out = []
    for row in processes.iter_rows(named=True):
        given = by_pid.get(row["pid"])
        frames = tuple(Frame(f["function"], f["file"], f["line"]) for f in row["frames"])
        if row["tp"] is not None:
            rank, label = row["tp"], f"TP{row['tp']}"
        elif row["pid"] is not None:
            rank, label = row["pid"], f"pid {row['pid']}"
        else:  # pasted without its head: named by where it is
            rank, label = -row["first_line"], f"{row['source_file'].rsplit('/', 1)[-1]} line {row['first_line']}"
        mains = row["main_ids"] or []
        joined = (f"{row['source_file']} line {row['first_line']}: threads {', '.join(str(t) for t in mains)} are all "
                  f"named {profile.stacks.main_thread!r} in one process dump") if len(mains) > 1 else None
        out.append(RankStack(
            group=given or group_of(profile, row["group"], row["source_file"], row["title"], row["dp"],
                                    row["pp"], split_dp=split_dp),
            rank=rank, label=label, pid=row["pid"], title=row["title"], host=row["host"], ts=row["ts"],
            source=f"{row['source_file']} line {row['first_line']}", frames=frames,
            phase=classify(frames, profile.stacks), ts_confidence=row["ts_confidence"],
            dump=(row["source_file"], row["dump"]), not_one_snapshot=joined))
    return out


def thread_waits(stacks: pl.DataFrame | pl.LazyFrame, profile: Profile) -> dict[tuple[str, int | None], str]:
    """Per dump (file, dump number), what its threads show of one thread waiting on another, in
    words: the main thread waiting for a queue's item, joining threads that are themselves blocked
    in their own code, or stopped at the very line another idle thread is stopped at. One snapshot
    cannot tell a deadlock from a slow producer; it can say where to look, and a second round would."""
    frame = stacks.lazy() if isinstance(stacks, pl.DataFrame) else stacks
    rows = (frame.filter(pl.col("depth").is_not_null() & (pl.col("depth") <= 6))
            .select("source_file", "dump", "thread_id", "thread_name", "pid", "status", "depth", "function", "file",
                    "line").sort("source_file", "dump", "thread_id", "depth").collect())
    out: dict[tuple[str, int], str] = {}
    for (source_file, dump), threads in rows.group_by("source_file", "dump", maintain_order=True):
        stacks_of = {t: [Frame(f, fi or "", ln) for f, fi, ln in part.select("function", "file", "line").rows()]
                     for (t,), part in threads.group_by("thread_id", maintain_order=True)}
        heads = threads.filter(pl.col("depth") == 0)
        main = heads.filter(pl.col("thread_name") == profile.stacks.main_thread)
        if main.is_empty():
            main = heads.filter(pl.col("thread_id") == pl.col("pid"))
        if main.is_empty() or len(stacks_of) == 0:
            continue
        main_id = main.get_column("thread_id")[0]
        said = _wait_in_words(stacks_of, main_id, heads)
        if said:
            out[(str(source_file), dump)] = said
    return out


def _own_code(frame: Frame) -> bool:
    """A Python frame of the program's (or a library's) own code: not the standard library's
    waiting places, not a native frame (`read (libc.so.6)`, which threads share all the time)."""
    return frame.file.endswith(".py") and not _STDLIB_WAIT_FILE.search(frame.file)


def _wait_in_words(stacks_of: Mapping[int, list[Frame]], main_id: int, heads: pl.DataFrame) -> str | None:
    main = stacks_of.get(main_id) or []
    if not main:
        return None
    idle = {t for t, status in heads.select("thread_id", "status").rows() if status == "idle"}
    first = main[0]
    caller = next((f for f in main if not _THREAD_SYNC_FILE.search(f.file)), None)
    if any(f.function == "get" and f.file.endswith("queue.py") for f in main[:3]):
        return (f"the main thread waits for an item from a queue (`get` in queue.py"
                + (f", called from `{caller}`" if caller else "") + "), the queue empty at that moment")
    if first.function in ("_wait_for_tstate_lock", "join") and _THREAD_SYNC_FILE.search(first.file):
        blocked = [stacks_of[t][0] for t in idle if t != main_id and stacks_of.get(t) and _own_code(stacks_of[t][0])]
        if blocked:
            return (f"the main thread joins threads that are themselves stopped in their own code "
                    f"({', '.join(f'`{f}`' for f in blocked[:4])}): consistent with a lock deadlock")
    if main_id in idle and _own_code(first):
        same = [t for t in idle if t != main_id and stacks_of.get(t) and stacks_of[t][0] == first]
        if same:
            return (f"the main thread and {len(same)} other thread{'s' if len(same) > 1 else ''} are stopped at the "
                    f"same line, `{first}`, all idle: contention for a lock there, or a deadlock")
    return None


def _outside_wait(r: RankStack) -> str:
    """A rank's main thread waiting on the device or the network, with the first two frames of the
    program's own code that led there (native frames and third-party packages passed over)."""
    start = r.frames.index(r.phase.frame) + 1 if r.phase.frame in r.frames else 0
    own = [f for f in r.frames[start:] if f.file.endswith(".py") and not _THIRD_PARTY_FILE.search(f.file)][:2]
    return (f"{r.label}'s main thread waits on {_OUTSIDE[r.phase.phase]}, at {_where(r)}"
            + (", called from " + " ← ".join(f"`{f}`" for f in own) if own else ""))


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


def _rank(title: str | None, kind: str) -> int | None:
    """One rank from a process title, as `forensics.formats.pyspy.rank_expressions` reads it in frames."""
    found = re.search(rf"(?:^|[^A-Za-z]){kind.upper()}(\d+)", title or "")
    return int(found[1]) if found else None


def _unreadable(quarantine: pl.DataFrame | None, profile: Profile, split_dp: bool) -> list[tuple[str, Missing]]:
    """Failed dumps from the quarantine, each placed in its group by its capture header."""
    if quarantine is None or quarantine.is_empty():
        return []
    out = []
    for row in quarantine.filter(pl.col("format").str.starts_with("pyspy")).iter_rows(named=True):
        words = dict(w.split("=", 1) for w in (row["subject"] or "").split() if "=" in w)
        title = words.get("title")
        tp, dp, pp = (_rank(title, kind) for kind in ("tp", "dp", "pp"))
        group = group_of(profile, words.get("group"), row["source_file"], title, dp, pp, split_dp=split_dp)
        label = f"TP{tp}" if tp is not None else (f"pid {words['pid']}" if "pid" in words else row["source_file"])
        out.append((group, Missing(tp, label, f"{row['source_file']} line {row['line']}: {row['reason']}")))
    return out


def _ranks_text(ranks: Sequence[RankStack]) -> str:
    """`rank 3`, `ranks 0, 1, 2` (TP ranks) or the processes' labels (`pid 4242, pid 4243`)."""
    ordered = sorted(ranks, key=lambda r: r.rank)
    if all(r.label.startswith("TP") for r in ordered):
        return f"{'rank' if len(ordered) == 1 else 'ranks'} {', '.join(str(r.rank) for r in ordered)}"
    return ", ".join(r.label for r in ordered)


def _frame_key(r: RankStack) -> tuple[str, str] | None:
    """Where a rank's phase was decided, without the line (ranks may run different builds)."""
    return (r.phase.frame.function, r.phase.frame.file) if r.phase.frame else None


def _fragments(v: Verdict) -> str:
    """Why the verdict's dumps are not one snapshot each (joined fragments), or ""."""
    return "; ".join(r.not_one_snapshot for r in v.ranks if r.not_one_snapshot)


def _judge(group: str, number: int, ranks: list[RankStack], expected: int | None,
           unreadable: list[Missing], elsewhere: frozenset[int] = frozenset()) -> Verdict:
    by_phase: dict[str, list[int]] = {}
    for r in sorted(ranks, key=lambda r: r.rank):
        by_phase.setdefault(r.phase.phase, []).append(r.rank)
    present = {r.rank for r in ranks}
    numbered = bool(ranks) and all(r.label.startswith("TP") for r in ranks)
    size = expected if expected is not None else (max(present) + 1 if numbered and present else len(present))
    missing: list[Missing] = []
    if numbered:
        for rank in range(size):
            if rank in present or rank in elsewhere:  # a rank dumped in another group is not this group's
                continue
            known = [m for m in unreadable if m.rank == rank]
            missing.append(known[0] if known else Missing(rank, f"TP{rank}", "no dump of this rank in the bundle"))
    missing += [m for m in unreadable if m.rank is None or (not numbered and m.rank not in present)]

    in_collective = [r for r in ranks if r.phase.phase == "collective"]
    others = [r for r in ranks if r.phase.phase != "collective"]
    collective = called_from = None
    if in_collective:
        names = [r.phase.frame.function for r in in_collective if r.phase.frame]
        collective = max(sorted(set(names)), key=names.count) if names else None
        callers = [str(r.phase.caller) for r in in_collective if r.phase.caller]
        called_from = max(sorted(set(callers)), key=callers.count) if callers else None
    collectives = {_names(r.phase.frame.function)[-1] for r in in_collective if r.phase.frame}
    same_frame = len({_frame_key(r) for r in ranks}) == 1
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
    if verdict != ORDINARY_WORK and any(r.not_one_snapshot for r in ranks):
        verdict, holds = NO_VERDICT, False  # pasted fragments: a wait between them is no real moment's
    at = max((r.ts for r in ranks if r.ts), default=None)
    v = Verdict(group, number, at, verdict, collective, called_from, by_phase, ranks, missing, holds)
    return v


def _stuck_waiting(v: Verdict) -> bool:
    """Whether every rank of a verdict said to be at work stood in the same wait (a device
    synchronize, a collective, a transfer) in every round: then the stacks show a hang, not work."""
    return (v.verdict == ORDINARY_WORK and bool(v.ranks) and not _fragments(v)
            and all(v.progress.get(r.rank) == STUCK and r.phase.phase in WAITING_PHASES for r in v.ranks)
            and len({_frame_key(r) for r in v.ranks}) == 1)


def _where(r: RankStack) -> str:
    if r.phase.frame is None:
        return "no frame"
    line = f":{r.phase.frame.line}" if r.phase.frame.line is not None else ""
    return f"`{r.phase.frame.function}` ({r.phase.frame.file}{line})"


def _when(v: Verdict) -> str:
    if v.at is None:
        return ""
    if any(r.ts_confidence == "low" for r in v.ranks):
        return (f" (capture time unknown: {v.at:%Y-%m-%d %H:%M:%S} UTC is a file's modification time, "
                "not when the stacks were taken)")
    return f" at {v.at:%Y-%m-%d %H:%M:%S} UTC"


def explain(v: Verdict) -> str:
    """One paragraph naming the ranks and frames behind a verdict, written from the same ranks as
    its table (`ranks_by_phase`), so the two never disagree."""
    parts = [f"{v.group}{_when(v)}: {v.verdict}."]
    by_rank = {r.rank: r for r in v.ranks}
    classes: list[tuple[str, list[RankStack]]] = []
    for phase, numbers in sorted(v.ranks_by_phase.items(), key=lambda kv: kv[0] != "collective"):
        members = [by_rank[n] for n in numbers]
        if phase == "collective":  # which collective each rank waits in is the heart of a desync
            by_frame: dict[str, list[RankStack]] = {}
            for r in members:
                by_frame.setdefault(_where(r), []).append(r)
            classes += [(phase, rs) for _, rs in sorted(by_frame.items(), key=lambda kv: -len(kv[1]))]
        else:
            classes.append((phase, members))
    for phase, members in classes:
        frames = sorted({_where(r) for r in members})
        word = "are" if len(members) > 1 else "is"
        verb = ("wait in" if len(members) > 1 else "waits in") if phase == "collective" else (
            f"{word} in" if phase == "unknown" else f"{word} {phase.replace('_', ' ')} in")
        caller = f", called from `{members[0].phase.caller}`" if phase == "collective" and members[0].phase.caller \
            else ""
        text = _ranks_text(members)
        parts.append(f"{text[0].upper() if text.startswith('rank') else text[0]}{text[1:]} {verb} "
                     f"{' / '.join(frames)}{caller}.")
    if v.verdict == TP_DESYNC:
        waiting = [r for r in v.ranks if r.phase.phase == "collective"]
        away = [r for r in v.ranks if r.phase.phase != "collective"]
        if away:
            parts.append(f"A collective returns only when every rank of the group has entered it, so "
                         f"{_ranks_text(waiting)} wait for {_ranks_text(away)}, which took another path: the group "
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
    elif v.verdict == NO_VERDICT:
        parts.append(f"{_fragments(v)}. A process has one main thread, so this is not one snapshot of one process "
                     "(most likely fragments of separate captures pasted together), and no verdict is drawn from it. "
                     "Next: dump each process again, whole, every rank of the group at the same moment.")
    elif v.verdict == ALL_IDLE:
        parts.append("Every rank waits for work: nothing reaches this engine; look upstream (router, peer engine).")
    else:
        parts.append("No rank waits on another: the stacks show work, not a hang.")
        if joined := _fragments(v):
            parts.append(f"{joined}: not one snapshot of one process, read only as far as that.")
    if v.round == 0 and not v.progress and v.verdict in (TP_DESYNC, UNIFORM_WAIT, STRAGGLER_OR_MISSING):
        parts.append("This is one round of dumps, one snapshot: a second round a few seconds later would tell a "
                     "hang (the same stacks again) from work passing through.")
    if v.progress:
        stuck = [by_rank[r] for r, p in v.progress.items() if p == STUCK and r in by_rank]
        moving = [by_rank[r] for r, p in v.progress.items() if p == PROGRESSING and r in by_rank]
        if stuck:
            parts.append(f"Across rounds, {_ranks_text(stuck)} did not move (STUCK).")
        if moving:
            parts.append(f"Across rounds, {_ranks_text(moving)} moved (PROGRESSING).")
    if v.missing:
        listed = "; ".join(f"{m.label}: {m.reason}" for m in v.missing)
        parts.append(f"Missing: {listed}.")
        if v.verdict != NO_VERDICT:  # with no verdict drawn, there is none the missing ranks could change
            parts.append("The verdict holds whatever the missing ranks show." if v.holds_without_missing
                         else "The verdict could change with the missing ranks.")
    return " ".join(parts)


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
    ranks = _rank_stacks(processes, profile, groups_by_pid or {})
    if isinstance(quarantine, pl.LazyFrame):
        quarantine = quarantine.collect()
    unreadable = _unreadable(quarantine, profile, split_dp=not _dp_attention(processes))
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
            if v.ranks and all(r.phase.phase in _OUTSIDE for r in v.ranks):  # none at work: each waits outside
                waits += [_outside_wait(r) for r in v.ranks if r.dump not in waiting]
            if len(rounds) == 1 and v.verdict == ORDINARY_WORK and waits and not _fragments(v):
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
                             r.ts, f"{r.label}: {r.phase.phase} in {r.phase.frame}"[:80]) for r in v.ranks[:8]]
        final = next(f for f in last if f.group == v.group)
        # an earlier round is one snapshot of the rounds the last verdict was judged over: one verdict per process
        text = v.explanation if v in last else (
            f"{v.group}: round {v.round + 1} of {final.round + 1} (judged with the last round: {final.verdict})."
            if final.progress else f"{v.group}: {v.verdict} (round {v.round + 1}).")
        out.append(Finding("stack_verdict", main_track, v.group, v.at, text, None, evidence,
                           facts={"verdict": v.verdict if v in last or not final.progress else final.verdict,
                                  "round": v.round + 1, "ranks": sorted(r.rank for r in v.ranks)}))
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
        where = " / ".join(sorted({_where(r) for r in stuck}))
        phases = sorted({r.phase.phase.replace("_", " ") for r in stuck})
        out.append(Finding("stuck_process", main_track, v.group, v.at,
                           f"{v.group}: {_ranks_text(stuck)} showed the same stack in all {v.round + 1} rounds of "
                           f"dumps ({' / '.join(phases)} in {where}): {'they' if len(stuck) > 1 else 'it'} did not "
                           "move — a hang, not work passing through."
                           + (" A device synchronize waits on the GPU's queued work, not on a peer rank: look at the "
                              "device (nvidia-smi, Xid lines) and at what was launched before it."
                              if "device_sync" in {r.phase.phase for r in stuck} else ""),
                           None, [Evidence("stacks", r.source.rsplit(" line ", 1)[0],
                                           int(r.source.rsplit(" line ", 1)[1]), None, r.ts,
                                           f"{r.label}: {r.phase.phase} in {r.phase.frame}"[:80]) for r in stuck[:8]]))
    return out


@detector("stacks")
def run(ctx: Context) -> list[Finding]:
    """Each group's stack verdicts (kept in the context for the detectors after it) as findings."""
    ctx.verdicts, found = findings(ctx.timeline.stacks, ctx.timeline.quarantine, ctx.timeline.profile, ctx.main_track)
    return found
