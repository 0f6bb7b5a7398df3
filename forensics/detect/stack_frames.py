"""py-spy stacks read into ranks: each judged process's main-thread frames, the phase the profile's
rules give it, the engine it belongs to, what its threads wait on, and the dumps that failed.

For each process the main thread's frames are walked innermost first; the profile's first rule
that matches a frame gives the process's phase (collective, idle, transfer, device_sync, compute,
unknown). Processes are grouped into engines (the TP group: the header's `group`, else a
component named in the file's path or the title, split by pipeline stage and, unless DP
attention is on, by DP replica; a dump with neither is grouped by its file). `merge_stacks` merges
the ranks' stacks into a prefix tree, the way LLNL's STAT merges traces.

When the bundle holds processes the profile names (`[stacks] process_title`), only those are
judged; a bundle of other dumps (a training job, any Python service) has all its processes judged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import polars as pl

from forensics.profiles import Profile, StackRules

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
OUTSIDE = {"device_sync": "the device (its stream has not finished a copy or a kernel)",
           "network": "the network (a download, a hub or HTTP call)"}
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


def function_names(function: str) -> tuple[str, ...]:
    """A function's name as py-spy prints it, and bare: Python 3.11+ qualifies methods (`Scheduler.on_idle`)."""
    bare = function.rsplit(".", 1)[-1]
    return (function,) if bare == function else (function, bare)


def _matches(pattern: re.Pattern[str], function: str) -> bool:
    return any(pattern.search(name) for name in function_names(function))


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
    pid: int | None = None  # the process py-spy was pointed at, when its dump failed
    failed: bool = False  # py-spy was run on it and failed (the bundle says so), not merely absent


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


def dp_attention(processes: pl.DataFrame) -> bool:
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


def rank_stacks(processes: pl.DataFrame, profile: Profile, by_pid: Mapping[int, str]) -> list[RankStack]:
    """Each dump of `main_thread_stacks` as a rank of its group (`by_pid` first, else `group_of`),
    with its phase, and why it is not one snapshot of one process if it is not."""
    split_dp = not dp_attention(processes)
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
        return ("the main thread waits for an item from a queue (`get` in queue.py"
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


def phase_where(r: RankStack) -> str:
    """The frame that gave a rank its phase, as text (`function` (file:line)), or "no frame"."""
    if r.phase.frame is None:
        return "no frame"
    line = f":{r.phase.frame.line}" if r.phase.frame.line is not None else ""
    return f"`{r.phase.frame.function}` ({r.phase.frame.file}{line})"


def outside_wait(r: RankStack) -> str:
    """A rank's main thread waiting on the device or the network, with the first two frames of the
    program's own code that led there (native frames and third-party packages passed over)."""
    start = r.frames.index(r.phase.frame) + 1 if r.phase.frame in r.frames else 0
    own = [f for f in r.frames[start:] if f.file.endswith(".py") and not _THIRD_PARTY_FILE.search(f.file)][:2]
    return (f"{r.label}'s main thread waits on {OUTSIDE[r.phase.phase]}, at {phase_where(r)}"
            + (", called from " + " ← ".join(f"`{f}`" for f in own) if own else ""))


def _rank(title: str | None, kind: str) -> int | None:
    """One rank from a process title, as `forensics.sources.pyspy.dumps.rank_expressions` reads it in frames."""
    found = re.search(rf"(?:^|[^A-Za-z]){kind.upper()}(\d+)", title or "")
    return int(found[1]) if found else None


def unreadable_dumps(quarantine: pl.DataFrame | None, profile: Profile, split_dp: bool,
                     groups_of_files: Mapping[str, str] | None = None) -> list[tuple[str, Missing]]:
    """Failed dumps from the quarantine, each placed in its group by its capture header, else by
    `groups_of_files` (a failure naming only a pid, as SGLang's watchdog writes it, beside dumps of one
    group: the watchdog dumps the schedulers of one engine), else by its file. One per process:
    the attempts after the first are counted, not listed again."""
    if quarantine is None or quarantine.is_empty():
        return []
    out: dict[tuple[str, str], tuple[str, Missing, int]] = {}
    for row in quarantine.filter(pl.col("format").str.starts_with("pyspy")).iter_rows(named=True):
        words = dict(w.split("=", 1) for w in (row["subject"] or "").split() if "=" in w)
        title = words.get("title")
        tp, dp, pp = (_rank(title, kind) for kind in ("tp", "dp", "pp"))
        given = (groups_of_files or {}).get(row["source_file"]) if title is None and "group" not in words else None
        group = given or group_of(profile, words.get("group"), row["source_file"], title, dp, pp, split_dp=split_dp)
        pid = int(words["pid"]) if words.get("pid", "").isdigit() else None
        label = f"TP{tp}" if tp is not None else (f"pid {pid}" if pid is not None else row["source_file"])
        key = (group, label if pid is not None or tp is not None else f"{label} line {row['line']}")
        if key in out:  # another attempt on the same process (a retry, or its thread-less head)
            first_group, first, attempts = out[key]
            if row["reason"].startswith("py-spy failed") and ": py-spy failed" not in first.reason:
                first.reason = f"{row['source_file']} line {row['line']}: {row['reason']}"  # py-spy's own words
            out[key] = (first_group, first, attempts + 1)
            continue
        out[key] = (group, Missing(tp, label, f"{row['source_file']} line {row['line']}: {row['reason']}", pid,
                                   failed=True), 1)
    for group, missing, attempts in out.values():
        if attempts > 1:
            missing.reason += f" ({attempts} records of failure for this process in the bundle)"
    return [(group, missing) for group, missing, _ in out.values()]
