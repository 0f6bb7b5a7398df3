"""PyTorch's c10d watchdog lines, read as facts: each rank's collective in flight (seq, op, sizes,
timeout, how long it ran), its process group's last enqueued and completed work, the ranks' own
status lines on a dump signal ("Last enqueued NCCL work: N, last completed NCCL work: M"), and the
failed collective's stack c10d prints (ProcessGroupNCCL.cpp). From them: who never entered the
timed-out collective, when the stall began, and where it was called from."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from forensics.detect import clock, earliest, quoted, rank_list
from forensics.timeline.align import Timeline

WORK = re.compile(r"SeqNum=(?P<seq>-?[0-9]+), OpType=(?P<op>[A-Za-z_]+)(?:, NumelIn=(?P<numel_in>-?[0-9]+), "
                  r"NumelOut=(?P<numel_out>-?[0-9]+))?.*?Timeout\(ms\)=(?P<timeout_ms>[0-9]+)\)"
                  r"(?: ran for (?P<ran_ms>[0-9]+) milliseconds)?")
PG_STATUS = re.compile(r"work sequence id: (?P<seq>-?[0-9]+).*?last enqueued (?:NCCL )?work: (?P<enqueued>-?[0-9]+), "
                       r"last completed (?:NCCL )?work: (?P<completed>-?[0-9]+)")
#: A frame of c10d's "Stack trace of the failed collective" (Flight Recorder's stack of the call that
#: timed out), one per line after it: "#3 _decode_linear_all_reduce from /src/tensor_parallel.py:2574".
FAILED_COLLECTIVE_FRAME = re.compile(r"^#(?P<n>[0-9]+) (?P<function>\S+) from (?P<where>[^\n]*\S)", re.M)
DUMP_STATUS = re.compile(r"Last enqueued NCCL work: (?P<enqueued>-?[0-9]+), last completed NCCL work: "
                         r"(?P<completed>-?[0-9]+)")
PG = re.compile(r"\[PG ID (?P<pg>[0-9]+)(?: PG GUID (?P<guid>[^ \]]+))?(?:\([^)]*\))? Rank (?P<rank>[0-9]+)\]")
RANK = re.compile(r"\[Rank (?P<rank>[0-9]+)\]|^\[rank(?P<prefix>[0-9]+)\]:")


def rank_order(rank: str) -> int:
    return int(rank) if rank.isdigit() else 1 << 30


def who(ranks: list[str]) -> str:
    """"rank 3", "ranks 1, 2, 3, 5, 6, 7" or "ranks 0–1023": ranks named as the log names them."""
    numbers = [int(r) for r in ranks if r.isdigit()]
    others = [r for r in ranks if not r.isdigit()]
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + ", ".join(([rank_list(numbers)] if numbers else []) + others)


def collective_timeout(group: pl.DataFrame, where: str, statuses: pl.DataFrame) -> tuple[str, dict[str, Any]]:
    """Per rank and process group: the collective in flight (seq, op, sizes, timeout, how long it
    ran) and the last enqueued and completed work; then whether the ranks agree. `statuses` are the
    ranks' own status lines of the same log ("… Last enqueued NCCL work: N, last completed NCCL
    work: M", printed by every rank on a dump signal): a rank whose last enqueued work is below
    the timed-out sequence number never entered that collective — the rank to blame."""
    ranks, started, stack = rank_states(group, statuses)
    in_flight = {e["seq"] for e in ranks.values() if e.get("seq")}
    ops = {e["op"] for e in ranks.values() if e.get("op")}
    facts: dict[str, Any] = {"ranks": sorted(ranks, key=rank_order), "seq": sorted(int(q) for q in in_flight),
                             "op": sorted(ops), "pg": sorted({e["pg"] for e in ranks.values() if "pg" in e})}
    if len(in_flight) == 1:
        failed = int(next(iter(in_flight)))
        if culprits := [r for r, e in sorted(ranks.items(), key=lambda item: rank_order(item[0]))
                        if "seq" not in e and "enqueued" in e and int(e["enqueued"]) < failed]:
            facts["culprits"] = culprits
    verdict = _verdict(ranks, facts)
    if started:
        facts["started"] = min(started)
        verdict += f"{'; ' if verdict else ''}the timed-out work began at {clock(min(started))}"
    if stack:  # where it hung: c10d printed the failed collective's own call stack
        facts["stack"] = stack
        verdict += (f"{'. ' if verdict else ''}The failed collective was called from (innermost first, c10d's stack "
                    f"trace, {len(stack)} frames): {' ← '.join(stack)}")
    parts = _clauses(ranks)
    text = (f"collective timeout on {where} at {clock(earliest(group.get_column('ts')))}: "
            f"{'; '.join(parts) or f'{group.height} lines'}" + (f". {verdict[0].upper()}{verdict[1:]}"
                                                                 if verdict else "") + ".")
    return text, facts


def rank_states(group: pl.DataFrame, statuses: pl.DataFrame
                ) -> tuple[dict[str, dict[str, str]], list[datetime], list[str]]:
    """Each rank's state as its lines give it (its group, the work in flight and how long it ran,
    its last enqueued and completed work), when the timed-out work began, and the failed
    collective's stack."""
    ranks: dict[str, dict[str, str]] = {}
    started: list[datetime] = []
    stack: list[str] = []
    for row in group.iter_rows(named=True):
        text = row["message"] or ""
        entry = ranks.setdefault(rank_of(text, row), {})
        if (pg := PG.search(text)):
            entry["pg"] = pg["pg"]
        if (work := WORK.search(text)):
            entry.update({k: v for k, v in work.groupdict().items() if v is not None})
            ran_ms = int(work["ran_ms"] or work["timeout_ms"])
            if row["ts"] is not None:  # the work began as long before the watchdog's line as it ran
                started.append(row["ts"] - timedelta(milliseconds=ran_ms))
        if (status := PG_STATUS.search(text)):
            entry.setdefault("seq", status["seq"])
            entry.update(enqueued=status["enqueued"], completed=status["completed"])
        if not entry and (plain := re.search(r"Timed out waiting [0-9]+ ?ms for \w+ operation[^\n]*", text)):
            entry["plain"] = plain[0].strip()  # gloo's own timeout: no sequence number in it
        if not stack and "Stack trace of the failed collective" in text:
            stack = [m["function"] for m in FAILED_COLLECTIVE_FRAME.finditer(text)]
    for row in statuses.iter_rows(named=True):
        text = row["message"] or ""
        if (status := DUMP_STATUS.search(text)):
            entry = ranks.setdefault(rank_of(text, row), {})
            if (pg := PG.search(text)):
                entry.setdefault("pg", pg["pg"])
            entry.setdefault("enqueued", status["enqueued"])
            entry.setdefault("completed", status["completed"])
    return ranks, started, stack


def _clauses(ranks: dict[str, dict[str, str]]) -> list[str]:
    """One clause per state, naming every rank in it: "ranks 1, 2, 3 (PG 0) in BROADCAST seq 78 …"."""
    clauses: dict[str, list[str]] = {}
    for rank, entry in sorted(ranks.items(), key=lambda item: rank_order(item[0])):
        pg = entry.get("pg", "?")
        said = f" (PG {pg})" if pg != "?" else ""
        if "op" in entry:
            said += f" in {entry['op']} seq {entry['seq']}"
            if "ran_ms" in entry:
                said += f", ran {int(entry['ran_ms']) / 1000:.0f} s of its {int(entry['timeout_ms']) / 1000:.0f} s timeout"
        elif "seq" in entry:
            said += f" at work {entry['seq']}"
        elif "plain" in entry:
            said += f": {quoted(entry['plain'])}"
        elif "completed" in entry:
            said += " signalled to dump"
        if "completed" in entry:
            said += f"; last enqueued {entry['enqueued']}, last completed {entry['completed']}"
        clauses.setdefault(said, []).append(rank)
    return [f"{who(members)}{said}" for said, members in clauses.items()]


def _verdict(ranks: dict[str, dict[str, str]], facts: dict[str, Any]) -> str:
    """Whether the ranks agree, from the facts: the culprits that never entered, ranks in different
    collectives, or all in one (and then who might be to blame)."""
    if culprits := facts.get("culprits"):
        op = facts["op"][0] if len(facts["op"]) == 1 else "the collective"
        last = sorted({ranks[r]["enqueued"] for r in culprits}, key=int)
        return (f"{who(culprits)} never entered {op} seq {facts['seq'][0]} (last enqueued work {', '.join(last)}), "
                "which the others wait in: the ranks to blame, or what held them — a desync")
    if len(facts["seq"]) > 1 or len(facts["op"]) > 1:
        at: dict[str, list[str]] = {}
        for rank, entry in sorted(ranks.items(), key=lambda item: rank_order(item[0])):
            if "seq" in entry:
                at.setdefault(f"{entry.get('op') or 'work'} {entry['seq']}", []).append(rank)
        return ("the ranks that reported are at different collectives — a desync: "
                + "; ".join(f"{who(members)} at {where_at}" for where_at, members in at.items()))
    if facts["seq"] and len(ranks) > 1:
        return ("every rank that reported waits in the same collective: the rank to blame is one that did not "
                "report (or the transport)")
    if facts["seq"]:
        return "one rank reported: its peers' logs would show who never entered the collective"
    return ""


def rank_of(text: str, row: dict[str, Any]) -> str:
    """The rank a c10d line speaks for: its `[PG … Rank N]`, `[Rank N]` or `[rankN]:` prefix."""
    if (pg := PG.search(text)):
        return str(pg["rank"])
    if (match := RANK.search(text)):
        return str(match["rank"] or match["prefix"])
    return str(row.get("LOG_RANK") or "?")


def status_lines(timeline: Timeline, group: pl.DataFrame) -> pl.DataFrame:
    """The ranks' own status lines ("Last enqueued NCCL work: …") in the logs a timeout group came from."""
    events = timeline.events
    if "message" not in events.columns:
        return group.clear()
    sources = group.get_column("source_file").unique().to_list() if "source_file" in group.columns else []
    rows = events.lazy().filter(pl.col("message").str.contains("Last enqueued NCCL work: ", literal=True))
    if sources:
        rows = rows.filter(pl.col("source_file").is_in(sources))
    return rows.select([c for c in ("ts", "message", "LOG_RANK") if c in events.columns]).collect()
