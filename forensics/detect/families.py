"""The failure-mode families real fleets meet, their facts read from their lines with the layers'
tables (`profiles/layers/*.toml`): what `forensics.detect.failures` adds to a layer kind's finding.

- an NVIDIA Xid: each code's meaning, mnemonic and NVIDIA's immediate and investigatory action (its
  catalogue, kernel.toml's [xid*] tables), an Xid 154 line's recovery action;
- an NVSwitch SXid: its name, class and NVIDIA's recovery (fabric.toml's [sxid*] tables), from the
  driver's lines and the fabric manager's;
- a hung task or soft lockup: the task, its pid, how long, and the subsystem its call trace waits in
  (kernel.toml's [hung_task_subsystem]: a filesystem is not a GPU);
- torchrun's ChildFailedError table: each failed rank, its pid, exit code and signal, the rank torchrun
  names the root cause (only the first failure it saw), whether every rank failed alike;
- NCCL's error kind, what it points at and NCCL's "Last error:";
- a CUDA out-of-memory: the server, start-up or serving, the GPU, what was asked and what was free;
- the signal that ended a process, and a SIGKILL told beside the OOM killer's report of its host.

What a report prints after its first line (a call trace, the rest of a table) is read from the
records after it in the same source when the reader kept each line a record of its own.
"""

from __future__ import annotations

import re
from typing import Any

import polars as pl

from forensics.detect import Finding, clock, earliest, excerpt, rank_list
from forensics.profiles import layers, meaning
from forensics.timeline.align import Timeline

XID_DEVICES_NAMED = 8  # GPUs named one by one in an Xid finding; the rest are counted
XID = re.compile(r"NVRM: Xid \((?P<pci>PCI:[^)]*)\): (?P<code>[0-9]+)(?:, pid=(?P<pid>[^,]+))?(?:, name=(?P<name>[^,]+))?")


# --- the families' facts: what each kind's lines (and the lines after them) say, as values --------

FOLLOWING = 80  # records after a report read for what belongs to it (a call trace, torchrun's table)
REPORTS_READ = 20  # reports of one finding read that closely; the rest are counted
SIGNAL_KINDS = ("process_killed", "process_failed", "shell_killed", "container_exited",
                "distributed_launch_failure")
NONFATAL_TRACK_KINDS = ("gpu_xid_nonfatal", "nvswitch_nonfatal_error")


def layer_table(name: str) -> dict[str, str]:
    """A layer's table (`[hung_task_subsystem]`, `[oom_server]`, …) in its file's order; empty when
    no layer has it."""
    return next((layer.meanings[name] for layer in layers() if name in layer.meanings), {})


def _first_match(table: dict[str, str], *texts: str | None) -> str | None:
    """The value of the first entry of `table` (a pattern → value table) whose pattern any of
    `texts` holds."""
    for pattern, value in table.items():
        found = re.compile(pattern)
        if any(text and found.search(text) for text in texts):
            return value
    return None


def _following(timeline: Timeline, row: dict[str, Any], limit: int = FOLLOWING) -> list[str]:
    """`row`'s message and those of the records after it in the same source (its file, in line or
    byte order), up to `limit` records: what a report prints after its first line (a call trace, the
    rest of a table) when the reader kept each line a record of its own."""
    return _following_from(timeline, row, limit)[0]


def _following_from(timeline: Timeline, row: dict[str, Any], limit: int = FOLLOWING) -> tuple[list[str], Any]:
    """`_following`, and the place (line or byte offset) of the last record read. A lean timeline
    holds only the notable lines: the others are read from the case."""
    file, line, offset = row.get("source_file"), row.get("source_line"), row.get("source_offset")
    if file is None or (line is None and offset is None):
        return [row.get("message") or ""], None
    place, at = ("source_line", line) if line is not None else ("source_offset", offset)
    frame = (timeline.case.events if timeline.lean and timeline.case is not None else timeline.events.lazy())
    if place not in frame.collect_schema().names():
        return [row.get("message") or ""], None
    rows = (frame.filter((pl.col("source_file").cast(pl.String) == str(file)) & (pl.col(place) >= at))
            .sort(place).head(limit).select("message", place).collect())
    found = [m or "" for m in rows.get_column("message").to_list()]
    return (found, rows.get_column(place).max()) if found else ([row.get("message") or ""], None)


def _report_rows(group: pl.DataFrame) -> list[dict[str, Any]]:
    return list(group.head(REPORTS_READ).iter_rows(named=True))


# Xid: NVIDIA's catalogue (kernel.toml's [xid*] tables) -----------------------------------------------

XID_DETAIL = re.compile(r"NVRM: Xid \((?P<pci>PCI:[^)]*)\): (?P<code>[0-9]+), (?P<rest>.*)")
XID_NVLINK5 = re.compile(r"^(?P<unit>[A-Z0-9_/]+) (?P<severity>Nonfatal|Fatal)\b")
XID_RECOVERY = re.compile(r"recovery action changed from 0x[0-9a-f]+ \([^)]*\) to 0x[0-9a-f]+ \((?P<action>[^)]*)\)")


def xid_action(code: str) -> tuple[str | None, str | None]:
    """NVIDIA's immediate action for an Xid code (its catalogue's resolution bucket) and that
    bucket's words."""
    bucket = meaning("xid_action", code)
    return bucket, (meaning("xid_bucket", bucket) if bucket else None)


def _xid_facts(messages: list[str]) -> list[dict[str, Any]]:
    """Per Xid code in `messages`: how often, on which GPUs, what it means and what NVIDIA asks."""
    codes: dict[str, dict[str, Any]] = {}
    for text in (line for message in messages for line in (message or "").splitlines()):  # a folded record's too
        found = XID.search(text)
        if found is None:
            continue
        code = found["code"]
        entry = codes.setdefault(code, {"code": int(code), "count": 0, "gpus": [], "pid": found["pid"],
                                        "process": found["name"], "name": meaning("xid_name", code),
                                        "meaning": meaning("xid", code)})
        entry["count"] += 1
        if found["pci"] not in entry["gpus"]:
            entry["gpus"].append(found["pci"])
        detail = XID_DETAIL.search(text)
        rest = detail["rest"] if detail else ""
        if (nvlink := XID_NVLINK5.match(rest)) and int(code) in range(144, 151):
            entry.setdefault("units", []).append(nvlink["unit"])
            entry["severity"] = nvlink["severity"]
        if recovery := XID_RECOVERY.search(rest):
            entry["recovery_action"] = recovery["action"]
        entry["action"], entry["action_words"] = xid_action(code)
        entry["investigate"] = meaning("xid_investigate", code)
    return list(codes.values())


def xid_words(group: pl.DataFrame, where: str, nonfatal: bool = False) -> tuple[str | None, dict[str, Any]]:
    """The Xid codes of `group` with what each means and NVIDIA's action for it: a GPU fault, or
    (`nonfatal`) the events NVIDIA's catalogue says need no action."""
    xids = _xid_facts(group.get_column("message").to_list())
    said = []
    for x in xids:
        devices = x["gpus"]
        if len(devices) > 1:  # each GPU is named, up to a few: one address would hide the others
            who = f"on {len(devices):,} GPUs: {', '.join(devices[:XID_DEVICES_NAMED])}" + (
                f" and {len(devices) - XID_DEVICES_NAMED:,} more" if len(devices) > XID_DEVICES_NAMED else "")
        else:
            who = ", ".join(v for v in (devices[0] if devices else None, f"pid {x['pid']}" if x["pid"] else None,
                                        x["process"]) if v and "unknown" not in v)
        text = (f"Xid {x['code']}" + (f" × {x['count']}" if x["count"] > 1 else "") + (f" ({who})" if who else "")
                + f": {x['meaning'] or 'a code the table does not know (see NVIDIA’s Xid catalogue)'}")
        if x.get("units"):
            text += f" ({', '.join(dict.fromkeys(x['units']))}, {x['severity'].lower()})"
        if x.get("recovery_action"):
            text += f"; the driver now asks for: {x['recovery_action']}"
        if x["action"]:
            text += f" — NVIDIA's action: {x['action_words'] or x['action'].lower()} ({x['action']})"
        said.append(text)
    if not said:
        return None, {}
    first = clock(earliest(group.get_column("ts")))
    head = f"non-fatal GPU events on {where} at {first} (reported, no fault)" if nonfatal else \
        f"GPU fault on {where} at {first}"
    return f"{head}: " + "; ".join(said) + ".", {"xids": xids}


# SXid: the NVSwitch driver's and the fabric manager's reports (fabric.toml's [sxid*] tables) -------

SXID = re.compile(r"SXid \((?P<pci>PCI:[^)]*)\): (?P<code>[0-9]+), (?P<cls>Fatal|Non-fatal)"
                  r"(?:, Link (?P<link>[0-9]+))?")
FM_SXID = re.compile(r"detected NVSwitch (?P<cls>non-fatal|fatal) error (?P<code>[0-9]+) on fid [0-9]+ on NVSwitch "
                     r"pci bus id (?P<pci>\S+) physical id [0-9]+ port (?P<link>[0-9]+)")
FM_MULTICAST = "failed to find the GPU handle"


def sxid_words(group: pl.DataFrame, where: str, nonfatal: bool = False) -> tuple[str, dict[str, Any]]:
    """The SXid codes of `group`, each with NVIDIA's name, class and recovery."""
    codes: dict[str, dict[str, Any]] = {}
    multicast = 0
    for text in (line for message in group.get_column("message").drop_nulls().to_list()
                 for line in message.splitlines()):
        found = SXID.search(text) or FM_SXID.search(text)
        if found is None:
            multicast += FM_MULTICAST in text
            continue
        entry = codes.setdefault(found["code"], {
            "code": int(found["code"]), "count": 0, "switches": [], "links": [], "name": meaning("sxid", found["code"]),
            "class": meaning("sxid_class", found["code"]), "said": found["cls"].lower()})
        entry["count"] += 1
        for key, value in (("switches", found["pci"]), ("links", found["link"])):
            if value and value not in entry[key]:
                entry[key].append(value)
        entry["action"] = meaning("sxid_action", found["code"]) or meaning("sxid_class_action", entry["said"])
    said = []
    for s in codes.values():
        links = ", ".join(s["links"][:XID_DEVICES_NAMED])
        where_on = ", ".join(s["switches"][:XID_DEVICES_NAMED]) + (
            f", link{'s' if len(s['links']) > 1 else ''} {links}" if s["links"] else "")
        said.append(f"SXid {s['code']}" + (f" × {s['count']}" if s["count"] > 1 else "") + f" ({where_on})"
                    + f": {s['name'] or 'a code the table does not know'} ({s['said']}"
                    + (f"; NVIDIA lists it {s['class']}" if s["class"] and s["class"] != s["said"] else "") + ")"
                    + (f" — NVIDIA's recovery: {s['action']}" if s["action"] else ""))
    if multicast:
        said.append(f"{multicast} × the fabric manager could not find a GPU of a job's multicast team "
                    "(an NVLink failure between the GPUs and the NVSwitches)")
    first = clock(earliest(group.get_column("ts")))
    head = f"non-fatal NVSwitch events on {where} at {first} (reported, no fault)" if nonfatal else \
        f"NVSwitch fault on {where} at {first}"
    return f"{head}: " + "; ".join(said) + ".", {"sxids": list(codes.values()), "multicast_failures": multicast}


# hung tasks and soft lockups: the task, its pid and the subsystem of its call trace -----------------

HUNG = re.compile(r"INFO: task (?P<task>.+?):(?P<pid>[0-9]+) blocked for more than (?P<seconds>[0-9]+) seconds")
LOCKUP = re.compile(r"soft lockup - CPU#(?P<cpu>[0-9]+) stuck for (?P<seconds>[0-9]+)s! "
                    r"\[(?P<task>.+?):(?P<pid>[0-9]+)\]")
# a frame of the kernel's call trace: "func+0x1e/0x40 [module]", "? func+…" (a guess, skipped),
# "RIP: 0010:func+0x…" (the soft lockup's instruction)
FRAME = re.compile(r"(?:^|[\s\]:(])(?P<guess>\?\s+)?(?P<func>[A-Za-z_.][\w.]*)\+0x[0-9a-f]+/0x[0-9a-f]+"
                   r"(?:\s+\[(?P<module>\w+)\])?")


def _frames(lines: list[str]) -> list[str]:
    """The call trace's frames after a report's first line, innermost first, guesses left out;
    up to the next report."""
    frames = []
    for n, text in enumerate(lines):
        for line in (text or "").splitlines():
            if n and (HUNG.search(line) or LOCKUP.search(line)):
                return frames
            for found in FRAME.finditer(line):
                if not found["guess"]:
                    frames.append(found["func"] + (f" [{found['module']}]" if found["module"] else ""))
    return frames


def subsystem(frames: list[str]) -> tuple[str, str] | None:
    """(the subsystem's words, the frame that names it): the first entry of kernel.toml's
    [hung_task_subsystem] a frame matches (the most specific), at its innermost such frame."""
    for pattern, words in layer_table("hung_task_subsystem").items():
        found = re.compile(pattern)
        for frame in frames:
            if found.search(frame):
                return words, frame
    return None


def hung_tasks(timeline: Timeline, group: pl.DataFrame) -> dict[str, Any]:
    """Each report's task, pid, how long, and the subsystem its call trace waits in."""
    tasks = []
    for row in _report_rows(group):
        message = row.get("message") or ""
        found = HUNG.search(message) or LOCKUP.search(message)
        if found is None:
            continue
        following = _following(timeline, row)
        # the report's own record first: a reader that folded the trace into it holds it whole
        lines = [message.split(found.group(0), 1)[-1], *following[1:]]
        where = subsystem(_frames(lines))
        tasks.append({"task": found["task"], "pid": int(found["pid"]), "seconds": int(found["seconds"]),
                      "cpu": int(found["cpu"]) if "cpu" in found.groupdict() else None,
                      "subsystem": where[0] if where else None, "frame": where[1] if where else None})
    return {"tasks": tasks} if tasks else {}


def hung_said(facts: dict[str, Any]) -> str:
    said = []
    for t in facts.get("tasks", [])[:4]:
        how = (f"stuck on CPU {t['cpu']} for {t['seconds']} s" if t.get("cpu") is not None
               else f"blocked for more than {t['seconds']} s")
        said.append(f"{t['task']} (pid {t['pid']}) {how} "
                    + (f"in {t['subsystem']}, at {t['frame']}" if t["subsystem"] else
                       "(no call trace of it in the evidence: the kernel prints one after the report)"))
    more = len(facts.get("tasks", [])) - 4
    return (" " + "; ".join(said) + (f"; and {more} more" if more > 0 else "") + ".") if said else ""


# torchrun's failure summary: ChildFailedError tables -------------------------------------------------

ELASTIC_MARK = r"ChildFailedError|Root Cause(?: \(first observed failure\))?:"
ELASTIC_FIELD = re.compile(r"^\s+(?P<key>time|host|rank|exitcode|error_file|traceback|msg)\s*:\s?(?P<value>.*)$")
ELASTIC_SIGNAL = re.compile(r"Signal (?P<n>[0-9]+) \((?P<name>SIG[A-Z0-9]+)\) received by PID")


def elastic_tables(text: str) -> list[dict[str, Any]]:
    """torchrun's failure summaries in `text` (lines as they were written): each a table of the
    failed ranks, "Failures:" and the "Root Cause (first observed failure):" it names; the older
    format ("Root Cause:", "Other Failures:", `msg:`) too."""
    tables: list[dict[str, Any]] = []
    table: dict[str, Any] | None = None
    section = entry = None

    def close() -> None:
        nonlocal table, section, entry
        if table and table["ranks"]:
            tables.append(table)
        table, section, entry = None, None, None

    for line in text.splitlines():
        bare = line.strip()
        if not bare or re.fullmatch(r"[=\-*]+", bare) or bare == "<NO_OTHER_FAILURES>":
            continue
        if bare.endswith(("ChildFailedError:", "ChildFailedError")):
            close()
            table = {"name": None, "ranks": []}
        elif re.fullmatch(r"\S+ FAILED", bare):
            if table is None or table["ranks"]:
                close()
                table = {"name": None, "ranks": []}
            table["name"] = bare[:-len(" FAILED")]
        elif bare in ("Failures:", "Other Failures:") or bare.startswith("Root Cause"):
            table = table or {"name": None, "ranks": []}
            section = "root" if bare.startswith("Root Cause") else "failure"
        elif table is not None and section and re.fullmatch(r"\[[0-9]+\]:", bare):
            entry = {"root_cause": section == "root"}
            table["ranks"].append(entry)
        elif entry is not None and (field := ELASTIC_FIELD.match(line)):
            entry[field["key"]] = field["value"].strip()
        elif entry is not None and line[:1].isspace():
            continue  # a traceback's own lines under `traceback :`
        elif table is not None:
            close()
    close()
    return [_elastic_values(t) for t in tables]


def _elastic_values(table: dict[str, Any]) -> dict[str, Any]:
    """A table's rows as values: rank, local rank, pid, exit code, signal, host, time."""
    rows = []
    for entry in table["ranks"]:
        rank = re.match(r"(-?[0-9]+)(?: \(local_rank: ([0-9]+)\))?", entry.get("rank", ""))
        code = re.match(r"(-?[0-9]+)(?: \(pid: ([0-9]+)\))?", entry.get("exitcode", ""))
        signal = ELASTIC_SIGNAL.search(entry.get("traceback", ""))
        exit_code = int(code[1]) if code else None
        name = signal["name"] if signal else (meaning("signal", -exit_code) if exit_code and exit_code < 0 else None)
        rows.append({"rank": int(rank[1]) if rank else None,
                     "local_rank": int(rank[2]) if rank and rank[2] else None,
                     "pid": int(code[2]) if code and code[2] else None, "exit_code": exit_code, "signal": name,
                     "host": entry.get("host"), "time": entry.get("time"), "root_cause": entry["root_cause"],
                     "traceback": not (entry.get("traceback", "").startswith(("To enable traceback", "Signal "))
                                       or "traceback" not in entry)})
    return {"name": table["name"], "ranks": rows}


def elastic_facts(tables: list[dict[str, Any]]) -> dict[str, Any]:
    """What torchrun's tables say, as values: the failed ranks, their pids, exit codes, signals,
    hosts, the rank it names the root cause, and whether every rank failed alike."""
    rows = [r for t in tables for r in t["ranks"]]
    if not rows:
        return {}
    alike = len(rows) > 1 and len({(r["exit_code"], r["signal"]) for r in rows}) == 1 \
        and len({r["time"] for r in rows}) == 1
    root = next((r for r in rows if r["root_cause"]), None)
    return {"ranks": [r["rank"] for r in rows], "pids": [r["pid"] for r in rows],
            "exit_codes": sorted({r["exit_code"] for r in rows if r["exit_code"] is not None}),
            "signals": sorted({r["signal"] for r in rows if r["signal"]}),
            "hosts": list(dict.fromkeys(r["host"] for r in rows if r["host"])),
            "root_cause_rank": root["rank"] if root else None, "all_alike": alike,
            "scripts": list(dict.fromkeys(t["name"] for t in tables if t["name"])),
            "tracebacks_recorded": any(r["traceback"] for r in rows), "failed": rows}


def elastic_said(facts: dict[str, Any]) -> str:
    """torchrun's table in words."""
    if not facts:
        return ""
    rows = facts["failed"]
    what = ", ".join(f"exit code {c}" for c in facts["exit_codes"]) or "no exit code"
    if facts["signals"]:
        what += f" ({', '.join(facts['signals'])})"
    pids = [p for p in facts["pids"] if p is not None]
    text = (f" torchrun's failure summary{' (' + ', '.join(facts['scripts']) + ')' if facts['scripts'] else ''}: "
            f"{len(rows)} failed rank{'s' if len(rows) > 1 else ''} — rank{'s' if len(rows) > 1 else ''} "
            f"{rank_list(r['rank'] for r in rows if r['rank'] is not None)}"
            + (f" (pid{'s' if len(pids) > 1 else ''} {', '.join(map(str, pids[:8]))}{' …' if len(pids) > 8 else ''})"
               if pids else "")
            + (f" on {', '.join(facts['hosts'][:4])}" if facts["hosts"] else "") + f": {what}.")
    if facts["all_alike"]:
        root = facts["root_cause_rank"]
        text += (" Every rank failed alike, at the same second: one failure of the whole job (most often at start-up: "
                 "an argument, an import, the rendezvous, or a cause every rank shares)"
                 + (f", not rank {root}'s own — the \"root cause\" torchrun names is only the first failure it saw."
                    if root is not None else ", not one rank's own."))
    elif facts["root_cause_rank"] is not None and len(rows) > 1:
        text += (f" torchrun names rank {facts['root_cause_rank']} the root cause: the first failure it observed, not "
                 "necessarily the cause.")
    if not facts["tracebacks_recorded"] and not facts["signals"]:
        text += (" No rank's traceback is in the table (the script is not decorated with @record): each rank's own "
                 "error is in its output before the table.")
    return text


def elastic_in(timeline: Timeline) -> list[dict[str, Any]]:
    """Every torchrun table in the evidence, with the record it begins at (host, file, time): a
    table the reader folded into an earlier record (a collective timeout's) is found as well."""
    events = timeline.events
    if events.is_empty():
        return []
    columns = [c for c in ("ts", "host", "unit", "component", "source_file", "source_line", "source_offset",
                           "message", "event", "priority") if c in events.columns]
    order = [c for c in ("source_file", "source_line", "source_offset", "ts") if c in columns]
    hits = (events.lazy().filter(pl.col("message").str.contains(ELASTIC_MARK)).select(columns)
            .sort(order, nulls_last=True).collect())
    found, seen, read_to = [], set(), {}
    for row in hits.iter_rows(named=True):
        file = row.get("source_file")
        place = row["source_line"] if row.get("source_line") is not None else row.get("source_offset")
        if place is not None and read_to.get(file) is not None and place <= read_to[file]:
            continue  # within a table already read
        if len(read_to) + len(found) > REPORTS_READ * 5:
            break
        messages, read_to[file] = _following_from(timeline, row)
        for table in elastic_tables("\n".join(messages)):
            key = tuple((r["rank"], r["pid"], r["time"]) for r in table["ranks"])
            if key not in seen:
                seen.add(key)
                found.append({"row": row, "table": table})
    return found


ELASTIC_CHILD = re.compile(r"failed \(exitcode: (?P<code>-?[0-9]+)\) local_rank: (?P<local>[0-9]+) "
                           r"\(pid: (?P<pid>[0-9]+)\)")


def elastic_children(group: pl.DataFrame) -> dict[str, Any]:
    """What elastic's agent said of each child that died ("failed (exitcode: -9) local_rank: 3 (pid:
    812917)"), when torchrun's table is not in the evidence."""
    found = [m for text in group.get_column("message").drop_nulls().to_list() for m in ELASTIC_CHILD.finditer(text)]
    if not found:
        return {}
    return {"local_ranks": [int(m["local"]) for m in found], "pids": [int(m["pid"]) for m in found],
            "exit_codes": sorted({int(m["code"]) for m in found})}


def children_said(facts: dict[str, Any]) -> str:
    if not facts:
        return ""
    return (f" Elastic's agent saw local rank{'s' if len(facts['local_ranks']) > 1 else ''} "
            f"{rank_list(facts['local_ranks'])} (pid{'s' if len(facts['pids']) > 1 else ''} "
            f"{', '.join(map(str, facts['pids'][:8]))}) exit with code {', '.join(map(str, facts['exit_codes']))}.")


# NCCL's error kinds ----------------------------------------------------------------------------------

NCCL_CODE = re.compile(r"\b(nccl(?:UnhandledCudaError|SystemError|InternalError|InvalidArgument|InvalidUsage|"
                       r"RemoteError|Timeout))\b")
LAST_ERROR = re.compile(r"Last error:\s*\n\s*(?:\[rank[0-9]+\]:\s*)?(?P<line>\S.*)")


def nccl_facts(timeline: Timeline, group: pl.DataFrame) -> dict[str, Any]:
    """The NCCL error kinds of `group`'s records (their code, what it points at, NCCL's last error)."""
    phrases = layer_table("nccl_error")
    found: dict[str, dict[str, Any]] = {}
    for row in _report_rows(group):
        text = "\n".join(_following(timeline, row, 6))
        first = (row.get("message") or "")
        code = NCCL_CODE.search(first)
        name = code[1] if code else next((c for p, c in phrases.items() if p in first), None)
        if name is None:
            continue
        entry = found.setdefault(name, {"code": name, "meaning": meaning("nccl_error_meaning", name), "count": 0})
        entry["count"] += 1
        if "last_error" not in entry and (last := LAST_ERROR.search(text)):
            entry["last_error"] = last["line"].strip()
    return {"nccl_errors": list(found.values())} if found else {}


def nccl_said(facts: dict[str, Any]) -> str:
    return "".join(f" NCCL's error: {e['code']} — {e['meaning']}"
                   + (f" (NCCL's last error: “{excerpt(e['last_error'], 120)}”)" if e.get("last_error") else "") + "."
                   for e in facts.get("nccl_errors", []))


# CUDA out of memory: which server, start-up or serving, how much was asked and free ------------------

OOM_ASKED = re.compile(r"Tried to allocate (?P<asked>[0-9.]+ [KMGT]?i?B)"
                       r"|allocating (?P<asked2>[0-9.]+ [KMG]iB) on device")
OOM_DEVICE = re.compile(r"\bGPU (?P<gpu>[0-9]+)\b|on device (?P<dev>[0-9]+)|GPU=(?P<eq>[0-9]+)")
OOM_FREE = re.compile(r"of which (?P<free>[0-9.]+ [KMGT]?i?B) is free|; (?P<free2>[0-9.]+ [KMGT]?i?B) free;")
OOM_TOLD = 4  # servers and phases an out-of-memory finding tells one by one
OOM_TOTAL = re.compile(r"total capacity of (?P<total>[0-9.]+ [KMGT]?i?B)|(?P<total2>[0-9.]+ [KMGT]?i?B) total capacity")


def _served_before(timeline: Timeline, row: dict[str, Any]) -> bool:
    """Whether the log of `row` showed its server at work (progress, health or ready lines) before it."""
    if row.get("ts") is None or not {"progress", "ready", "health_ok"} <= set(timeline.events.columns):
        return False
    served = timeline.events.lazy().filter(
        pl.col("host").eq_missing(row.get("host")) & pl.col("unit").eq_missing(row.get("unit"))
        & (pl.col("ts") < row["ts"]) & (pl.col("progress").is_not_null() | pl.col("ready") | pl.col("health_ok")))
    return served.select(pl.len()).collect().item() > 0


def cuda_oom_facts(timeline: Timeline, group: pl.DataFrame) -> dict[str, Any]:
    """Per out-of-memory record: the server, the phase (start-up or serving), the GPU, how much was
    asked and how much was free."""
    found = []
    for row in _report_rows(group):
        text = "\n".join(_following(timeline, row, 6))
        phase = _first_match(layer_table("oom_phase"), text) or ("serving" if _served_before(timeline, row) else None)
        entry: dict[str, Any] = {
            "server": _first_match(layer_table("oom_server"), text, row.get("unit"), row.get("component")),
            "phase": phase}
        first = row.get("message") or ""
        for name, pattern in (("asked", OOM_ASKED), ("gpu", OOM_DEVICE), ("free", OOM_FREE), ("total", OOM_TOTAL)):
            if match := pattern.search(first):
                entry[name] = next(value for value in match.groups() if value)
        found.append(entry)
    return {"oom": found, "servers": sorted({f["server"] for f in found if f["server"]}),
            "phases": sorted({f["phase"] for f in found if f["phase"]})} if found else {}


def oom_said(facts: dict[str, Any]) -> str:
    """Each server and phase once (with the first record's numbers), then what each phase means."""
    told: dict[tuple[Any, Any], dict[str, Any]] = {}
    for entry in facts.get("oom", []):
        told.setdefault((entry["server"], entry["phase"]), entry)
    said = []
    for (server, phase), f in told.items():
        asked = (f" GPU {f['gpu']}" if f.get("gpu") else "") + (f" asked for {f['asked']}" if f.get("asked") else "")
        free = f" with {f['free']} free" + (f" of {f['total']}" if f.get("total") else "") if f.get("free") else ""
        when = {"start-up": "at start-up", "serving": "while serving"}.get(
            phase or "", "(the log does not say whether at start-up or serving)")
        numbers = f" —{asked}{free}" if asked or free else ""
        said.append(f"{server or 'a server the log does not name'} {when}{numbers}")
    if not said:
        return ""
    more = f"; and {len(said) - OOM_TOLD} more" if len(said) > OOM_TOLD else ""
    text = " Out of GPU memory: " + "; ".join(said[:OOM_TOLD]) + more + "."
    for phase in facts.get("phases", []):
        if words := meaning("oom_phase_meaning", phase):
            text += f" {words[0].upper()}{words[1:]}."
    return text


# a process ended by a signal: which one, and what that says ------------------------------------------

# (pattern, how its number reads): 1 the signal's number, 0 a launcher's exit code (-N, or 128 + N),
# -1 torchrun's negative exit code, 9 SIGKILL itself
SIGNAL_WORDS = ((re.compile(r"code=(?:killed|dumped), status=(?P<n>[0-9]+)/"), 1),
                (re.compile(r"exited with code (?P<n>-?[0-9]+)"), 0),
                (re.compile(r"exitcode:? *:? (?P<n>-[0-9]+)"), -1), (re.compile(r"Signal (?P<n>[0-9]+) \(SIG"), 1),
                (re.compile(r"(?m:^Killed$)| Killed  |killed by signal: Killed"), 9))


def signal_facts(group: pl.DataFrame) -> dict[str, Any]:
    """The signals that ended `group`'s processes, by what their lines say (systemd's status=9/KILL,
    a container's 137 or a launcher's -9, torchrun's "Signal 9 (SIGKILL)", the shell's Killed)."""
    signals: list[str] = []
    for text in group.get_column("message").drop_nulls().to_list():
        for pattern, how in SIGNAL_WORDS:
            for found in pattern.finditer(text):
                number = how if how > 1 else int(found["n"])
                if how == 0:  # a container's or launcher's exit code: 128 + N, or -N
                    number = -number if number < 0 else number - 128 if 128 < number <= 192 else 0
                elif how == -1:
                    number = -number
                if number > 0 and (name := meaning("signal", number)) and name not in signals:
                    signals.append(name)
    return {"signals": signals} if signals else {}


def signal_said(facts: dict[str, Any]) -> str:
    return "".join(f" {name}: {meaning('signal_meaning', name)}." for name in facts.get("signals", [])
                   if meaning("signal_meaning", name))


OOM_NEAR_S = 600.0  # an OOM-killer report this close to a SIGKILL on the same host is told beside it


def killed_and_oom(findings: list[Finding]) -> None:
    """Beside each process SIGKILL ended, the kernel's OOM-killer reports of its host near that time
    (the same pid said so), or that the evidence holds none: a SIGKILL leaves no traceback, the
    kernel's report is what says who sent it."""
    ooms = [f for f in findings if f.kind == "oom_kill"]
    for f in findings:
        if "SIGKILL" not in f.facts.get("signals", []):
            continue
        near = [o for o in ooms if (o.host == f.host or o.host is None or f.host is None)
                and (o.at is None or f.at is None or abs((o.at - f.at).total_seconds()) <= OOM_NEAR_S)]
        pids = {p for p in f.facts.get("pids", []) if p is not None}
        if near:
            victims = [v for o in near for v in o.facts.get("victims", [])]
            same = [v for v in victims if v["pid"] in pids]
            f.facts["oom_killer"] = same or victims
            f.text += (" The kernel's OOM killer killed " + ", ".join(f"{v['name']} (pid {v['pid']})" for v in
                                                                        (same or victims)[:4])
                       + f" on this host at {clock(near[0].at)}" + (": the same pid." if same else "."))
        else:
            f.text += (" No OOM-killer report is in the evidence for it: if the kernel's log of that minute has none,"
                       " the kill came from a person or an orchestrator.")
