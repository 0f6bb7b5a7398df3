"""One collective verdict per process group, from every source that saw the collectives.

Three sources speak of the same collectives: Flight Recorder dumps (each rank's last recorded
collectives and its process groups' last enqueued / completed work; `sources.flight_recorder`),
the process group's watchdog lines (`[Rank 3] Watchdog caught collective operation timeout:
WorkNCCL(SeqNum=…, OpType=…)`, `last enqueued work: …, last completed work: …`), and the py-spy
phase of each rank. `collective_table` puts them side by side, one row per process group and rank;
`detect` gives one verdict per group in the stack taxonomy:

- STRAGGLER_OR_MISSING: ranks that never entered the group's latest collective (named, with the
  collective's sequence number) — the ranks to blame, or ranks with no dump at all;
- TP_DESYNC: ranks at the same sequence number in different collectives (both named);
- SIZE_MISMATCH: the same collective with different tensor sizes on different ranks;
- UNIFORM_WAIT: every rank in the same collective and none completed it (transport or init, not
  the code).

Where the sources disagree (the watchdog names another sequence number than the recorder), the
verdict says so. A recorder dump is a snapshot: ranks dumped while passing a collective are a
moment apart, not stuck. So a missing rank or a uniform wait is only a verdict when the bundle logs
a collective timeout, or when the dumps show the wait lasted: each rank outside the latest
collective still outside it `MOMENT_S` after its peers entered it (its own dump's time), each rank
inside still inside that long after entering. When a dump's time is unknown the verdict says so;
different collectives or sizes at one sequence number are wrong at any moment.
Dumps of different jobs (folders) are kept apart: each job has its own rank 0 and group 0.

`torchfrtrace`'s own text, pasted (`sources.flight_recorder_text`), gives a verdict per block in
the same words: its missing ranks, its culprit and error type. That text holds no time, so these
verdicts are placed at no time and say so.
"""

from __future__ import annotations

import re

import polars as pl

from forensics.detect import Evidence, Finding, clock, excerpt, rank_list, span
from forensics.detect.stack_verdict import STRAGGLER_OR_MISSING, TP_DESYNC, UNIFORM_WAIT, Verdict
from forensics.detect.stacks import latest
from forensics.timeline.align import Timeline
from forensics.detect.registry import Context, detector

SIZE_MISMATCH = "SIZE_MISMATCH"
# a rank outside a collective its peers entered less than this long before its dump may be on its
# way in (a long step, a compile, a starved CPU): serving steps take milliseconds, watchdogs minutes
MOMENT_S = 10.0
RECORDER = "torch:flight_recorder"
PASTED = "torch:frtrace_text"
#: torchfrtrace's error types (`MatchState`), in the taxonomy's words
_MATCH_STATES = {"COLLECTIVE_TYPE_MISMATCH": TP_DESYNC, "SIZE_OR_SYNTAX_MISMATCH": SIZE_MISMATCH,
                 "COLLECTIVE_DTYPE_MISMATCH": SIZE_MISMATCH, "COLLECTIVE_STATE_MISMATCH": STRAGGLER_OR_MISSING}
TABLE_SCHEMA = {"job": pl.String, "pg": pl.String, "rank": pl.Int64, "seq": pl.Int64, "op": pl.String, "state": pl.String,
                "sizes": pl.String, "last_enqueued": pl.Int64, "last_completed": pl.Int64,
                "watchdog_seq": pl.Int64, "watchdog_op": pl.String, "stack_phase": pl.String}
_WATCHDOG = re.compile(r"(?:\[PG ID (?P<pg>[0-9]+)[^\]]* Rank (?P<pg_rank>[0-9]+)\]|\[Rank (?P<rank>[0-9]+)\])"
                       r"(?:.*?SeqNum=(?P<seq>-?[0-9]+), OpType=(?P<op>[A-Za-z_]+))?"
                       r"(?:.*?work sequence id: (?P<status_seq>-?[0-9]+).*?last enqueued (?:NCCL )?work: "
                       r"(?P<enqueued>-?[0-9]+), last completed (?:NCCL )?work: (?P<completed>-?[0-9]+))?")


def _ranks(text: str | None) -> list[int]:
    return [int(n) for n in re.findall(r"-?[0-9]+", text or "")]


def _recorded(timeline: Timeline) -> pl.DataFrame:
    """Each rank's latest recorded collective per process group (p2p work left out)."""
    events = timeline.events
    if "FR_RANK" not in events.columns:  # only the dumps' rows carry a rank (a paste names none)
        return pl.DataFrame()
    numbers = ("FR_RANK", "FR_SEQ", "FR_LAST_ENQUEUED", "FR_LAST_STARTED", "FR_LAST_COMPLETED", "FR_DUMPED_AT")
    rows = (events.lazy().filter((pl.col("data_type") == RECORDER) & pl.col("FR_SEQ").is_not_null()
                                 & (pl.col("FR_P2P") != "true").fill_null(True))
            .with_columns(pl.col(c).cast(pl.Int64, strict=False) for c in numbers if c in events.columns)
            .with_columns(*(pl.lit(None, pl.Int64).alias(c) for c in ("FR_DUMPED_AT",) if c not in events.columns),
                          *(pl.lit("").alias(c) for c in ("FR_JOB",) if c not in events.columns))
            .with_columns(pl.col("FR_JOB").fill_null("")).collect())
    if rows.is_empty():
        return rows
    return (rows.sort("FR_SEQ", "ts").group_by("FR_JOB", "FR_PG", "FR_RANK", maintain_order=True)
            .agg(pl.all().last()).sort("FR_JOB", "FR_PG", "FR_RANK"))


def _watchdog(timeline: Timeline) -> dict[tuple[str, int], dict[str, str]]:
    """What the watchdog lines say per (process group, rank)."""
    if "event" not in timeline.events.columns:
        return {}
    lines = (timeline.events.lazy().filter(pl.col("event").is_in(["collective_timeout", "process_group_abort"]))
             .select("message").collect().get_column("message").drop_nulls())
    said: dict[tuple[str, int], dict[str, str]] = {}
    for text in lines:
        for line in text.splitlines():
            found = _WATCHDOG.search(line)
            if not found:
                continue
            rank = found["pg_rank"] or found["rank"]
            entry = said.setdefault((found["pg"] or "?", int(rank)), {})
            entry.update({k: v for k, v in found.groupdict().items() if v is not None})
    return said


def _phases(verdicts: list[Verdict], job: str) -> dict[int, str]:
    """Each rank's py-spy phase: from the stack group named as the job's folder (`decode/…` and the
    group `decode`), else when the stacks hold one group (its ranks numbered as the job's)."""
    last = latest(verdicts)
    named = [v for v in last if v.group == job.split("/")[0]]
    chosen = named or (last if len(last) == 1 else [])
    if not chosen:
        return {}
    return {r.rank: f"{r.phase.phase} in {r.phase.frame.function}" if r.phase.frame else r.phase.phase
            for r in chosen[0].ranks}


def collective_table(timeline: Timeline, verdicts: list[Verdict] | None = None) -> pl.DataFrame:
    """One row per process group and rank: the recorder's latest collective (seq, op, state,
    sizes), its group's last enqueued and completed work, what the watchdog said, the py-spy phase."""
    recorded, watchdog = _recorded(timeline), _watchdog(timeline)
    rows: dict[tuple[str, str, int], dict[str, object]] = {}
    for r in recorded.iter_rows(named=True) if recorded.height else []:
        if r["FR_RANK"] is None:
            continue
        rows[(r["FR_JOB"], r["FR_PG"], r["FR_RANK"])] = {
            "job": r["FR_JOB"], "pg": r["FR_PG"], "rank": r["FR_RANK"], "seq": r["FR_SEQ"], "op": r["FR_OP"],
            "state": r["FR_STATE"], "sizes": r["FR_INPUT_SIZES"], "last_enqueued": r["FR_LAST_ENQUEUED"],
            "last_completed": r["FR_LAST_COMPLETED"]}
    by_rank: dict[tuple[object, object], list[dict[str, object]]] = {}  # (group, rank) → its rows, found once
    for (_, p, k), row in rows.items():
        by_rank.setdefault((p, k), []).append(row)
    for (pg, rank), said in watchdog.items():
        if not (said.get("seq") or said.get("status_seq") or said.get("completed")):
            continue  # a watchdog line that names a rank but no work (`HCCL watchdog thread terminated`)
        # a watchdog line names its group by id (the recorder by name, which is the id for unnamed
        # groups) and no job: it joins every job's row of that group and rank, else one of its own
        matching = by_rank.get((pg, rank), [])
        if not matching:
            matching = [rows.setdefault(("", pg, rank), {"job": "", "pg": pg, "rank": rank})]
        for row in matching:
            _say(row, said)
    phases = {job: _phases(verdicts or [], job) for job in {str(row["job"]) for row in rows.values()}}
    for row in rows.values():
        row["stack_phase"] = phases[str(row["job"])].get(int(row["rank"]))  # type: ignore[call-overload]
    return pl.DataFrame(list(rows.values()), schema=TABLE_SCHEMA).sort("job", "pg", "rank")


def _say(row: dict[str, object], said: dict[str, str]) -> None:
    """What a watchdog line says of one rank, into its table row."""
    named = said.get("seq") or said.get("status_seq")
    row["watchdog_seq"] = int(named) if named else None
    row["watchdog_op"] = said.get("op")
    if row.get("last_completed") is None and said.get("completed"):
        row.update(last_enqueued=int(said["enqueued"]), last_completed=int(said["completed"]))


def _names(ranks: list[int]) -> str:
    return ("rank " if len(set(ranks)) == 1 else "ranks ") + rank_list(ranks)


def detect(timeline: Timeline, verdicts: list[Verdict], main_track: str) -> list[Finding]:
    """A verdict per process group that the Flight Recorder recorded, and one per block of
    torchfrtrace's pasted text."""
    recorded = _recorded(timeline)
    if recorded.is_empty():
        return _pasted(timeline, main_track)
    table = collective_table(timeline, verdicts)
    out = []
    jobs = recorded.get_column("FR_JOB").n_unique()
    logged_timeout = ("event" in timeline.events.columns
                      and timeline.events.select((pl.col("event") == "collective_timeout").any()).item() is True)
    for (job, pg), rows in recorded.group_by("FR_JOB", "FR_PG", maintain_order=True):
        found = _group_finding(job, pg, rows, table, jobs, logged_timeout, main_track)
        if found is not None:
            out.append(found)
    return out + _pasted(timeline, main_track)


def _group_finding(job: str, pg: str, rows: pl.DataFrame, table: pl.DataFrame, jobs: int, logged_timeout: bool,
                   main_track: str) -> Finding | None:
    """The verdict on one process group of one job from its ranks' latest recorded collectives
    (`rows`), or None when the dumps show nothing stuck (a moment passing a collective, or every
    rank through the last it recorded)."""
    expected = _ranks(rows.get_column("FR_PG_RANKS").drop_nulls().head(1).to_list()[0]
                      if rows.get_column("FR_PG_RANKS").drop_nulls().len() else "")
    seen = sorted(r for r in rows.get_column("FR_RANK").to_list() if r is not None)
    latest_seq = int(rows.get_column("FR_SEQ").max())  # type: ignore[arg-type]
    at_latest = rows.filter(pl.col("FR_SEQ") == latest_seq)
    behind = rows.filter(pl.col("FR_SEQ") < latest_seq)
    not_dumped = sorted(set(expected) - set(seen))
    ops = dict(at_latest.group_by("FR_OP").agg(pl.col("FR_RANK")).iter_rows())
    sizes = dict(at_latest.group_by("FR_INPUT_SIZES").agg(pl.col("FR_RANK")).iter_rows())
    desc = rows.get_column("FR_PG_DESC").drop_nulls().head(1).to_list()
    group = ((f"{job.split('/')[0]}: " if jobs > 1 else "") + f"process group {pg}"
             + (f" ({desc[0]})" if desc and desc[0] else ""))
    op_at = ", ".join(sorted(ops))
    mine = table.filter((pl.col("job") == job) & (pl.col("pg") == pg))
    timed_out = mine.get_column("watchdog_seq").drop_nulls().len() > 0 or logged_timeout
    waited = _waited(at_latest, behind)
    parts = []
    if len(ops) > 1:
        verdict = TP_DESYNC
        parts.append(f"At collective {latest_seq} the ranks are in different collectives: "
                     + "; ".join(f"{_names(r)} in {op}" for op, r in sorted(ops.items()))
                     + ". A collective completes only when every rank enters the same one: the group is "
                     "desynchronised.")
    elif len(sizes) > 1:
        verdict = SIZE_MISMATCH
        parts.append(f"Collective {latest_seq} ({op_at}) has different sizes on different ranks: "
                     + "; ".join(f"{_names(r)}: {s}" for s, r in sorted(sizes.items())) + ".")
    elif waited is not None and waited < MOMENT_S and not timed_out:
        return None  # dumped while passing a collective: a moment, not a wait
    elif behind.height or not_dumped:
        verdict = STRAGGLER_OR_MISSING
        if behind.height:
            lag = ", ".join(f"rank {r['FR_RANK']} at {r['FR_SEQ']} ({r['FR_OP']})"
                            for r in behind.iter_rows(named=True))
            parts.append(f"{_names(behind.get_column('FR_RANK').to_list())[0].upper()}"
                         f"{_names(behind.get_column('FR_RANK').to_list())[1:]} never entered collective "
                         f"{latest_seq} ({op_at}), which {_names(at_latest.get_column('FR_RANK').to_list())} "
                         f"entered: the last each recorded is {lag}. These are the ranks to blame (or what "
                         "held them: their own stacks say).")
        if not_dumped:
            parts.append(f"No Flight Recorder dump of {_names(not_dumped)} of the group's ranks "
                         f"{expected}: what they did is not in the evidence.")
    else:
        completed = at_latest.get_column("FR_LAST_COMPLETED").drop_nulls()
        if completed.len() and (completed >= latest_seq).all():
            return None  # every rank completed the last collective it recorded: nothing stuck here
        verdict = UNIFORM_WAIT
        parts.append(f"Every rank ({rank_list(seen)}) is in collective {latest_seq} ({op_at}) and none "
                     "completed it: the ranks agree with each other, so the wait is below them (the transport, "
                     "the device, communicator init).")
    if waited is not None:
        parts.append(f"When the dumps were written, {_names(at_latest.get_column('FR_RANK').to_list())} had "
                     f"waited {span(waited) if waited >= 1 else f'{waited:.2f} s'} in collective {latest_seq}.")
    elif not timed_out and verdict in (STRAGGLER_OR_MISSING, UNIFORM_WAIT):
        parts.append("The dumps do not say when they were written (their file times were not kept), so how long "
                     "the collective had waited is unknown: a watchdog timeout line or a second dump would tell "
                     "a hang from a moment.")
    disagree = mine.filter(pl.col("watchdog_seq").is_not_null() & pl.col("seq").is_not_null()
                           & (pl.col("watchdog_seq") != pl.col("seq")))
    if disagree.height:
        parts.append("The sources disagree: " + "; ".join(
            f"for rank {r['rank']} the watchdog names work {r['watchdog_seq']}, the recorder {r['seq']}"
            for r in disagree.iter_rows(named=True)) + ".")
    at = rows.get_column("ts").max()
    text = (f"{group}, Flight Recorder of {_names(seen)} (up to {clock(at)}): {verdict}. " + " ".join(parts))
    evidence = [Evidence("events", r["source_file"], r["source_line"], None, r["ts"], excerpt(r["message"]))
                for r in rows.sort("FR_RANK").iter_rows(named=True)][:8]
    return Finding("collective_verdict", main_track, None, at, text, None, evidence,
                   facts={"verdict": verdict, "group": group})


def _expected(ranks: str | None, world: str | None) -> str:
    """The group's ranks as torchfrtrace printed them: a set (`{0, 1, 2, 3}`), or only their count
    (older torch printed `expected ranks: 4`)."""
    if ranks and re.fullmatch(r"\s*[0-9]+\s*", ranks):
        return f" of the group's {ranks.strip()} ranks"
    if ranks:
        return f" of the expected ranks {rank_list(_ranks(ranks))}"
    return f" of the group's {world} ranks" if world else ""


def _pasted(timeline: Timeline, main_track: str) -> list[Finding]:
    """A verdict per block of torchfrtrace's text: what it found, in the taxonomy's words."""
    events = timeline.events
    if "FR_FINDING" not in events.columns:
        return []
    out = []
    for r in events.filter(pl.col("data_type") == PASTED).iter_rows(named=True):
        group = f"process group {r['FR_PG'] or '?'}" + (f" ({r['FR_PG_DESC']})" if r.get("FR_PG_DESC") else "")
        what = f"collective {r['FR_SEQ']} ({r['FR_OP'] or '?'})"
        expected = _expected(r.get("FR_EXPECTED"), r.get("FR_WORLD_SIZE"))
        kind = r["FR_FINDING"]
        if kind == "missing":
            verdict = STRAGGLER_OR_MISSING
            said = (f"R{_names(_ranks(r['FR_MISSING']))[1:]}{expected} never joined {what}: "
                    "the ranks to blame (or what held them).")
        elif kind in ("errors", "size_mismatch"):
            errors = r["FR_ERRORS"] or ""
            types = re.findall(r"Error type: ([A-Z_]+)", errors)
            verdict = (SIZE_MISMATCH if kind == "size_mismatch"
                       else next((_MATCH_STATES[t] for t in types if t in _MATCH_STATES), STRAGGLER_OR_MISSING))
            culprits = sorted({int(n) for n in re.findall(r"Culprit rank (-?[0-9]+)", errors)})
            said = (f"C{what[1:]} has errors" + (f"; culprit {_names(culprits)}" if culprits else "")
                    + (f": {errors}." if errors else "."))
        elif kind == "undecided":
            verdict = STRAGGLER_OR_MISSING
            said = (f"torchfrtrace could not decide what is wrong with a collective: no Flight Recorder dump of "
                    f"{_names(_ranks(r['FR_MISSING_DUMPS']))}; what they did is not in the evidence.")
        else:
            continue  # "no errors found for this collective entry": nothing it could name
        text = (f"{group}, torchfrtrace's text (pasted; it holds no time): {verdict}. {said} The dumps themselves "
                "would give when each rank recorded it and how long the collective had waited.")
        evidence = [Evidence("events", r["source_file"], r["source_line"], None, None, excerpt(r["message"]))]
        out.append(Finding("collective_verdict", main_track, None, None, text, None, evidence,
                           facts={"verdict": verdict, "group": group}))
    return out


def _waited(at_latest: pl.DataFrame, behind: pl.DataFrame) -> float | None:
    """How long the wait had lasted when the dumps were written: the shortest time a rank in the
    latest collective had been in it, and the shortest time a rank outside it had stayed outside
    since its peers entered it (its own dump against their last entry); None when a time is unknown."""
    inside = at_latest.select((pl.col("FR_DUMPED_AT") - pl.col("ts").dt.epoch("ns")) / 1e9).to_series()
    entered = at_latest.select(pl.col("ts").dt.epoch("ns").max()).item()
    outside = behind.select((pl.col("FR_DUMPED_AT") - entered) / 1e9).to_series()
    waits = pl.concat([inside, outside]) if behind.height else inside
    return None if waits.null_count() or waits.is_empty() else max(0.0, float(waits.min()))  # type: ignore[arg-type]


@detector("collectives")
def run(ctx: Context) -> list[Finding]:
    """Flight Recorder dumps and torchfrtrace text: who never joined which collective."""
    return detect(ctx.timeline, ctx.verdicts, ctx.main_track)
